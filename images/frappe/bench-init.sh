#!/bin/bash
# Runs inside the image's chroot (root): installs frappe-bench (FRAPPE_BENCH_SPEC) and uv
# from PyPI, the Python Frappe needs (uv downloads it; exit 4 when it is outside the branch's
# range from versions.json), `bench init` (GitHub + PyPI + npm), creates the
# site with throwaway passwords (replaced per clone at first resume by apply.d/frappe.sh),
# builds assets, and sets the socket.io config for a single site URL.
set -euo pipefail
export HOME=/home/frappe PIP_INDEX_URL=$FRAPPE_PYPI_INDEX UV_INDEX_URL=$FRAPPE_PYPI_INDEX
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
mysqld_safe --skip-syslog > /dev/null 2>&1 &
for _ in $(seq 1 60); do mysqladmin ping > /dev/null 2>&1 && break; sleep 1; done
redis-server --daemonize yes --port 6379 > /dev/null

python3 -m venv /opt/bench
/opt/bench/bin/pip install -q uv "frappe-bench$FRAPPE_BENCH_SPEC"
ln -sf /opt/bench/bin/bench /usr/local/bin/bench
su frappe -c "/opt/bench/bin/uv python install $FRAPPE_PYTHON"
py=$(su frappe -c "/opt/bench/bin/uv python find $FRAPPE_PYTHON")
/bin/sh /tmp/python-in-range.sh "$py" "$FRAPPE_PYTHON_MIN" "$FRAPPE_PYTHON_BELOW" "$FRAPPE_BRANCH"
db_root=golden-root-password
mysql -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED BY '$db_root'; FLUSH PRIVILEGES;"
su frappe -c "cd /home/frappe && bench init frappe-bench --frappe-branch $FRAPPE_BRANCH \
  --frappe-path $FRAPPE_GIT_URL --python $py --skip-redis-config-generation"
su frappe -c "cd /home/frappe/frappe-bench && bench new-site $FRAPPE_SITE --db-root-password $db_root \
  --admin-password golden-admin && bench use $FRAPPE_SITE && bench build"
# Socket.io through the single site URL: apply.d/frappe.sh sets host_name and the public
# port per box; the realtime server and the web server listen inside the guest.
su frappe -c "cd /home/frappe/frappe-bench && bench set-config -g developer_mode 1 && \
  bench set-config -g serve_default_site true"
mysqladmin -uroot -p"$db_root" shutdown || true
redis-cli shutdown nosave || true
