# One JSON object per stdout line, for the control plane (apps/api/src/ansible/events.ts
# parses these). Ansible loads it from this directory next to the playbooks when
# ANSIBLE_STDOUT_CALLBACK=doppio_jsonl. Results of no_log tasks arrive already censored
# (TaskQueueManager.send_callback hands callbacks TaskResult.clean_copy()).
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
    name: doppio_jsonl
    type: stdout
    short_description: one JSON event per line (plan, task start, task result, stats)
    description:
      - The task list of each play when it starts, then each task's start and result, then the stats.
"""

import json
import sys
import time

from ansible.plugins.callback import CallbackBase

OUTPUT_LIMIT = 8192
META = ("meta", "ansible.builtin.meta")


def _text(value):
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "\n".join(_text(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _clip(text):
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + "\n[... cut]"


def _role(task):
    role = getattr(task, "_role", None)
    return role.get_name(include_role_fqcn=False) if role else None


def _name(task):
    """The task's own name, without the "role : " prefix Ansible adds."""
    role, name = _role(task), task.get_name(include_role_fqcn=False)
    return name[len(role) + 3:] if role and name.startswith(role + " : ") else name


def _walk(blocks):
    """Every task of these blocks in order (block, rescue, always), blocks nested."""
    for block in blocks:
        for part in (block.block, block.rescue, block.always):
            for item in part or []:
                if hasattr(item, "block"):
                    yield from _walk([item])
                elif item.action not in META:
                    yield item


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "doppio_jsonl"

    def _emit(self, event, **fields):
        fields["event"] = event
        # When it happened (ms since the epoch): the control plane may apply it later.
        fields["at"] = round(time.time() * 1000)
        sys.stdout.write(json.dumps(fields, default=str) + "\n")
        sys.stdout.flush()

    def v2_playbook_on_play_start(self, play):
        tasks = [{"id": t._uuid, "name": _name(t), "role": _role(t)} for t in _walk(play.compile())]
        self._emit("plan", play=play.get_name(), tasks=tasks)

    def _task_start(self, task, handler):
        # Meta tasks (flush_handlers, …) start but never report a result or count in the stats.
        if task.action in META:
            return
        self._emit("task_start", id=task._uuid, name=_name(task), role=_role(task), handler=handler)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task, False)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task, True)

    def _result(self, status, result):
        r = result._result
        if r.get("censored"):
            output, error = r["censored"], r["censored"] if status in ("failed", "unreachable") else None
        else:
            if "results" in r:
                output = _text([i.get("stdout") or i.get("msg") or "" for i in r["results"]])
            else:
                output = _text(r.get("stdout") or r.get("msg") or "")
            error = None
            if status in ("failed", "unreachable"):
                parts = [_text(r.get("msg")), _text(r.get("stderr"))]
                if "results" in r:
                    parts += [_text(i.get("msg")) for i in r["results"] if i.get("failed")]
                error = "\n".join(p for p in parts if p) or json.dumps(r, default=str)[:OUTPUT_LIMIT]
        self._emit(
            "task_result",
            id=result._task._uuid,
            host=result._host.get_name(),
            status=status,
            changed=bool(r.get("changed")),
            output=_clip(output),
            error=_clip(error) if error else None,
        )

    def v2_runner_on_ok(self, result):
        self._result("changed" if result._result.get("changed") else "ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("ignored" if ignore_errors else "failed", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        hosts = {h: stats.summarize(h) for h in sorted(stats.processed.keys())}
        self._emit("stats", hosts=hosts)
