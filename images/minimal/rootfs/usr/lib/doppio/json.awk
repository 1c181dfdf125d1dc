# Flattens the box metadata JSON (one document on stdin) into shell assignments that are
# safe to eval: keys become M_<path with non-alphanumerics as _>, values are single-quoted.
#   mode=meta: every scalar except env.*       ->  M_network_ip='10.0.0.2'
#              and, with -v envfile=F, env.* into F as  export NAME='value'
#   mode=env:  only env.*                       ->  export NAME='value'
# busybox has no jq; the host writes compact JSON (JSON.stringify) padded with spaces.
BEGIN { RS = "\001" }
{ s = s $0 }
END {
  pos = 1
  n = length(s)
  # The env file exists (possibly empty) even when there are no variables.
  if (envfile != "") printf "" > envfile
  parse_value("")
}
function ws() { while (pos <= n && index(" \t\r\n", substr(s, pos, 1)) > 0) pos++ }
function q(v) { gsub(/'/, "'\\''", v); return "'" v "'" }
function emit(path, v,   k) {
  if (mode == "meta" && envfile != "" && path ~ /^env\./) {
    k = substr(path, 5)
    if (k ~ /^[A-Za-z_][A-Za-z0-9_]*$/) print "export " k "=" q(v) > envfile
    return
  }
  if (mode == "env") {
    if (path ~ /^env\./) {
      k = substr(path, 5)
      if (k ~ /^[A-Za-z_][A-Za-z0-9_]*$/) print "export " k "=" q(v)
    }
    return
  }
  if (path ~ /^env\./) return
  k = path
  gsub(/[^A-Za-z0-9]/, "_", k)
  print "M_" k "=" q(v)
}
function parse_value(path,   c) {
  ws()
  c = substr(s, pos, 1)
  if (c == "{") parse_object(path)
  else if (c == "[") parse_array(path)
  else if (c == "\"") emit(path, parse_string())
  else {
    match(substr(s, pos), /^[-+0-9.eEa-z]+/)
    emit(path, substr(s, pos, RLENGTH))
    pos += RLENGTH
  }
}
function parse_object(path,   k, c) {
  pos++
  ws()
  if (substr(s, pos, 1) == "}") { pos++; return }
  while (pos <= n) {
    ws()
    k = parse_string()
    ws()
    pos++
    parse_value(path == "" ? k : path "." k)
    ws()
    c = substr(s, pos, 1)
    pos++
    if (c != ",") return
  }
}
function parse_array(path,   i, c) {
  pos++
  ws()
  if (substr(s, pos, 1) == "]") { pos++; return }
  i = 0
  while (pos <= n) {
    parse_value(path "." i)
    i++
    ws()
    c = substr(s, pos, 1)
    pos++
    if (c != ",") return
  }
}
function hexval(h,   i, v) {
  v = 0
  h = tolower(h)
  for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
  return v
}
function parse_string(   out, c, e, cp) {
  pos++
  out = ""
  while (pos <= n) {
    c = substr(s, pos, 1)
    if (c == "\"") { pos++; return out }
    if (c == "\\") {
      e = substr(s, pos + 1, 1)
      pos += 2
      if (e == "n") out = out "\n"
      else if (e == "t") out = out "\t"
      else if (e == "r") out = out "\r"
      else if (e == "b") out = out "\b"
      else if (e == "f") out = out "\f"
      else if (e == "u") {
        cp = hexval(substr(s, pos, 4))
        pos += 4
        # Only control characters arrive escaped from JSON.stringify; keep them in ASCII.
        out = out (cp < 128 && cp > 0 ? sprintf("%c", cp) : "?")
      } else out = out e
      continue
    }
    out = out c
    pos++
  }
  return out
}
