"""sparkctl_inline: Ansible's linear strategy, each task run in this process.

Ansible runs every task of every host in a forked worker process. For
``playbooks/render.yml``, whose every task runs on the controller and only
templates a file there (``sparkctl_render_file``, ``set_fact``), the fork is
most of the cost: 100 trivial ``set_fact`` tasks on sim.ini's five hosts cost
about 67 ms of CPU each over an empty playbook on the test machine, where a
rendered template costs a few ms (benchmarks/render_time.py has the
figures). This strategy is linear's, task for task (order, includes,
conditionals, loops, facts, failures, callbacks), except that
``_queue_task`` runs the worker's own code, ``TaskExecutor`` on a copy of the
task, here and puts its result on the same queue a worker would.

ansible-core 2.19 deprecates strategy plugins outside ansible.builtin ("no
alternative for third party strategy plugins is currently planned") and warns
so when one loads. That is why only render.yml uses it (provision's preflight
does not): a render reviewed on every edit is where the CPU matters, and
``-e sparkctl_render_strategy=linear`` renders the same without it.

Only for plays that contact no host: tasks run one after the other (no forks,
no parallel hosts), so a task that waits on a network would hold up the
whole run. ``tests/unit/test_render_strategy.py`` renders the lab inventories
both ways and compares the trees byte for byte.
"""

from __future__ import annotations

import typing as t

from ansible._internal import _task
from ansible._internal._errors import _error_utils
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.plugins import loader as plugin_loader
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule

DOCUMENTATION = """
    name: sparkctl_inline
    short_description: the linear strategy without worker processes
    description:
      - Runs each task of each host in the controller's process, in linear's order.
      - For controller-only plays (sparkctl render); never for plays that contact hosts.
    author: sparkctl
"""

if t.TYPE_CHECKING:
    from ansible.inventory.host import Host
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task


class StrategyModule(LinearStrategyModule):
    """linear, with the worker's body run inline."""

    def _queue_task(self, host: Host, task: Task, task_vars: dict[str, t.Any],
                    play_context: PlayContext) -> None:
        # What linear's _queue_task and WorkerProcess._run do, without the process:
        # the cache entry the result queue's reader looks the task up in, the
        # runner_on_start callback, the executor, and its result on the final queue.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        # A worker works on its own (forked) copies; TaskExecutor templates the
        # task's attributes in place, so it gets a copy here too.
        own_task = task.copy()
        try:
            with _task.TaskContext(own_task):
                result = TaskExecutor(host, own_task, dict(task_vars), play_context,
                                      self._loader, plugin_loader.get_plugin_loader_namespace(),
                                      self._final_q, self._variable_manager).run()
        except Exception as ex:
            result = _error_utils.result_dict_from_exception(ex)
        self._final_q.send_task_result(_RawTaskResult(
            host=host, task=own_task, return_data=result, task_fields=own_task.dump_attrs()))
        self._pending_results += 1
