# Sourced by /usr/lib/doppio/apply with the M_* metadata variables. Per-clone secrets at
# first resume (never shared between clones of one golden snapshot): MariaDB root and
# site DB passwords, the site's encryption_key and the Administrator password; and the
# site URL settings so the browser reaches socket.io through the single HTTPS site URL.
# Unverified on the project's build machines (the frappe image cannot be built there).
if [ "$want" -gt 0 ] && [ ! -e /run/doppio/frappe-applied ]; then
  B=/home/frappe/frappe-bench
  S=$(cat "$B/sites/currentsite.txt" 2> /dev/null || echo dev.localhost)
  cfg="$B/sites/$S/site_config.json"
  db_name=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["db_name"])' "$cfg")
  # The golden's root password until the first apply of this box, its own afterwards
  # (/run is empty again after a stop/start or reset, so this runs once per boot).
  root_pw=""
  i=0
  while [ -z "$root_pw" ]; do
    for pw in golden-root-password "$M_secrets_db_password"; do
      mysqladmin -uroot -p"$pw" ping > /dev/null 2>&1 && root_pw=$pw && break
    done
    i=$((i + 1)); [ $i -lt 300 ] || { say "mariadb not up"; return 1; }
    [ -n "$root_pw" ] || usleep 100000
  done
  mysql -uroot -p"$root_pw" -e "ALTER USER IF EXISTS '$db_name'@'localhost' IDENTIFIED BY '$M_secrets_db_password'; ALTER USER IF EXISTS '$db_name'@'%' IDENTIFIED BY '$M_secrets_db_password'; ALTER USER 'root'@'localhost' IDENTIFIED BY '$M_secrets_db_password'; FLUSH PRIVILEGES;" ||
    { say "mariadb passwords not changed"; return 1; }
  port=443
  case "$M_site_url" in http://*) port=80 ;; esac
  hostport=${M_site_url#*://}
  case "$hostport" in *:*) port=${hostport##*:} ;; esac
  su frappe -c "cd $B && bench --site $S set-config db_password '$M_secrets_db_password' && \
    bench --site $S set-config encryption_key '$M_secrets_encryption_key' && \
    bench --site $S set-config host_name '$M_site_url' && bench set-config -g socketio_port $port && \
    bench --site $S set-admin-password '$M_secrets_admin_password'" > /var/log/doppio/apply-frappe.log 2>&1 ||
    { say "frappe secrets failed (see /var/log/doppio/apply-frappe.log)"; return 1; }
  touch /run/doppio/frappe-applied
fi
