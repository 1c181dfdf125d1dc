#!/bin/sh
# python-in-range.sh PYTHON MIN BELOW [BRANCH]: succeeds when PYTHON's major.minor is >= MIN
# and < BELOW (the branch's range from versions.json), else says why and exits 4 (the
# recipe's "toolchain cannot be met"). bench-init.sh runs it on the Python uv installed.
py=$1 min=$2 below=$3 branch=${4:-this Frappe branch}
v=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2> /dev/null) || {
  echo "frappe toolchain: cannot run Python at $py" >&2
  exit 4
}
if "$py" -c 'import sys
lo, hi = (tuple(int(x) for x in a.split(".")) for a in sys.argv[1:3])
sys.exit(0 if lo <= sys.version_info[:2] < hi else 1)' "$min" "$below"; then
  echo "python $v at $py satisfies >=$min,<$below"
else
  echo "frappe toolchain: $branch needs Python >=$min,<$below, but the installed Python is $v ($py)" >&2
  exit 4
fi
