"""sparkctl_inline: Ansible's linear strategy, each task run in this process.

Ansible runs every task of every host in a forked worker process. For
``playbooks/render.yml``, whose every task runs on the controller and only
templates a file there (``sparkctl_render_file``, ``set_fact``), the fork is
most of the cost: 100 trivial ``set_fact`` tasks on sim.ini's five hosts cost
about 67 ms of CPU each over an empty playbook on the test machine, where a
rendered template costs a few ms (benchmarks/render_time.py has the
figures). This strategy is linear's, task for task (order, includes,
conditionals, loops, facts, failures, callbacks), except for three things,
each the same work without a cost that only forked workers need:

- ``_queue_task`` runs the worker's own code, ``TaskExecutor`` on a copy of
  the task, here;
- what the executor sends on the final queue (the task's result, a loop
  item's callback) is read at once, as the results thread would read it, not
  written into a pipe for that thread: linear's ``_wait_on_pending_results``
  sleeps in 1 ms steps until the thread has caught up, about 300 times
  (0.4 s) in a render of lab.ini;
- Jinja's compilation of a template or expression into Python code is kept,
  keyed on everything the code is made from (``_CompileCache``): Ansible
  compiles every string each time it is templated, for every host and every
  lazy variable lookup (896 compiles of 116 distinct strings in a render of
  lab.ini, about half of its CPU).

ansible-core 2.19 deprecates strategy plugins outside ansible.builtin ("no
alternative for third party strategy plugins is currently planned") and warns
so when one loads. That is why only render.yml uses it (provision's preflight
does not): a render reviewed on every edit is where the CPU matters, and
``-e sparkctl_render_strategy=linear`` renders the same without it (and
``-e sparkctl_render_compile_cache=false`` keeps the strategy, without the
compile cache).

Only for plays that contact no host: tasks run one after the other (no forks,
no parallel hosts), so a task that waits on a network would hold up the
whole run. ``tests/unit/test_render_strategy.py`` renders the lab inventories
all three ways and compares the trees byte for byte.
"""

from __future__ import annotations

import typing as t
from multiprocessing.reduction import ForkingPickler

from ansible._internal import _task
from ansible._internal._errors import _error_utils
from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext
from ansible._internal._templating._jinja_common import _TemplateConfig
from ansible.errors import AnsibleError
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins import loader as plugin_loader
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from jinja2 import nodes
from jinja2.utils import _PassArg

DOCUMENTATION = """
    name: sparkctl_inline
    short_description: the linear strategy without worker processes
    description:
      - Runs each task of each host in the controller's process, in linear's order.
      - For controller-only plays (sparkctl render); never for plays that contact hosts.
    author: sparkctl
"""

if t.TYPE_CHECKING:
    from types import CodeType

    from ansible.executor.play_iterator import PlayIterator
    from ansible.inventory.host import Host
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task

# What Jinja's code generation reads of the environment (jinja2 3.1 lexer.py
# get_lexer's key, compiler.py CodeGenerator: sandboxed with intercepted_binops
# and _unops, is_async, finalize, autoescape, optimized; parser.py: extensions).
_ENVIRONMENT_FIELDS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "code_generator_class",
    "sandboxed",
    "intercepted_binops",
    "intercepted_unops",
    "is_async",
    "finalize",
    "autoescape",
    "optimized",
)


class _Compiled(t.NamedTuple):
    code: CodeType
    # (name, is_filter, how it is passed its context): the one thing the code
    # takes from the filters and tests it calls (compiler.py _filter_test_common).
    plugins: tuple[tuple[str, bool, _PassArg | None], ...]


def _pass_arg(env: AnsibleEnvironment, name: str, is_filter: bool) -> _PassArg | None:
    plugins = env.filters if is_filter else env.tests
    return _PassArg.from_obj(plugins.get(name))


class _CompileCache:
    """``Environment.compile`` of a source string, keeping the code object it returns.

    ansible-core 2.19 compiles every template it renders from its source, anew
    (lib/ansible/_internal/_templating/_engine.py TemplateEngine._compile_template
    -> AnsibleEnvironment.from_string, and _compile_expression ->
    compile_expression -> from_string), in a new AnsibleEnvironment for each
    copy of a templar. Jinja's ``from_string`` is ``from_code(self,
    self.compile(source), ...)`` (jinja2 3.1 environment.py): the code object
    is bound to the asking environment only there, by exec'ing it with that
    environment, so the same code serves every environment whose compilation
    would produce it; each still gets its own template object.

    The key is the source text, the compile arguments, every setting of the
    environment the code generator reads (_ENVIRONMENT_FIELDS, its extensions)
    and the two process-wide inputs Ansible adds: whether backslashes are being
    escaped (_TemplateCompileContext, AnsibleLexer.tokeniter) and
    ALLOW_EMBEDDED_TEMPLATES (AnsibleCodeGenerator.visit_Const). The filters and
    tests a template calls are looked up again on every use: a name that now
    finds nothing, or a plugin passed its context differently, compiles anew.
    Only successful compiles are kept; an error is Jinja's own, every time.
    A debuggable template source (AnsibleEnvironment._debuggable_template_source)
    and raw compiles bypass the cache.
    """

    def __init__(self) -> None:
        self.compiled: dict[tuple[t.Any, ...], _Compiled] = {}
        self.hits = 0
        self._original: t.Any = None

    def install(self) -> None:
        if self._original is None:
            self._original = AnsibleEnvironment.compile
            cache = self

            def compile(  # noqa: PLR0917 -- Jinja's
                env: AnsibleEnvironment,
                source: t.Any,
                name: str | None = None,
                filename: str | None = None,
                raw: bool = False,
                defer_init: bool = False,
            ) -> t.Any:
                return cache.compile(env, source, (name, filename, raw, defer_init))

            AnsibleEnvironment.compile = compile

    def uninstall(self) -> None:
        if self._original is not None:
            AnsibleEnvironment.compile = self._original
            self._original = None

    def compile(
        self,
        env: AnsibleEnvironment,
        source: t.Any,
        args: tuple[str | None, str | None, bool, bool],
    ) -> t.Any:
        """Jinja's ``env.compile(source, *args)``, from the cache where it can be."""
        original = self._original
        name, filename, raw, _ = args
        if raw or not isinstance(source, str) or env._debuggable_template_source:
            return original(env, source, *args)
        escaping = _TemplateCompileContext.current(optional=True)
        key = (
            str(source),
            args,
            type(env),
            tuple(getattr(env, field) for field in _ENVIRONMENT_FIELDS),
            tuple(type(ext) for ext in env.extensions.values()),
            bool(escaping and escaping.escape_backslashes),
            _TemplateConfig.allow_embedded_templates,
        )
        entry = self.compiled.get(key)
        if entry is not None and self._same_plugins(env, entry):
            self.hits += 1
            return entry.code
        try:
            tree = env._parse(source, name, filename)
            code = original(env, tree, *args)
        except Exception:
            # Not kept: the error is Jinja's own, as an uncached compile raises it.
            return original(env, source, *args)
        calls = {
            (node.name, isinstance(node, nodes.Filter))
            for node in tree.find_all((nodes.Filter, nodes.Test))
        }
        try:
            plugins = tuple(
                (plugin, is_filter, _pass_arg(env, plugin, is_filter))
                for plugin, is_filter in sorted(calls)
            )
        except Exception:  # a plugin that fails to load: its template is not kept
            return code
        self.compiled[key] = _Compiled(code, plugins)
        return code

    @staticmethod
    def _same_plugins(env: AnsibleEnvironment, entry: _Compiled) -> bool:
        try:
            return all(
                _pass_arg(env, name, is_filter) is how for name, is_filter, how in entry.plugins
            )
        except Exception:  # a plugin that fails to load now: compile anew, and fail as Jinja does
            return False


_COMPILE_CACHE = _CompileCache()


def _through_pipe(obj: t.Any) -> t.Any:
    """``obj`` as the results thread receives it from the final queue: pickled by
    SimpleQueue.put and unpickled by SimpleQueue.get (Python's
    multiprocessing/queues.py; ansible's FinalQueue is a SimpleQueue)."""
    return ForkingPickler.loads(ForkingPickler.dumps(obj))


class _InlineQueue:
    """The final queue as an inline task's executor sees it.

    TaskExecutor sends a loop item's or a retry's callback on it
    (``send_callback``), and a worker the task's result (``send_task_result``,
    WorkerProcess._run in lib/ansible/executor/process/worker.py). Each is
    handled here as results_thread_main handles a CallbackSend and a
    _WireTaskResult (lib/ansible/plugins/strategy/__init__.py), in the order
    sent, before the task's result is looked for. Anything else goes to the
    real queue.
    """

    def __init__(self, strategy: StrategyModule) -> None:
        self._strategy = strategy

    def _received(self, task_result: _RawTaskResult) -> _RawTaskResult:
        """``task_result`` as the results thread turns it back into a raw result."""
        wire = _through_pipe(task_result.as_wire_task_result())
        return self._strategy._convert_wire_task_result_to_raw(wire)

    def send_callback(self, method_name: str, task_result: _RawTaskResult) -> None:
        self._strategy._tqm.send_callback(method_name, self._received(task_result))

    def send_task_result(self, task_result: _RawTaskResult) -> None:
        raw = self._received(task_result)
        with self._strategy._results_lock:
            self._strategy._results.append(raw)

    def __getattr__(self, name: str) -> t.Any:
        return getattr(self._strategy._final_q, name)


class StrategyModule(LinearStrategyModule):  # type: ignore[misc]  # ansible ships no type hints
    """linear, with the worker's body run inline."""

    def run(self, iterator: PlayIterator, play_context: PlayContext) -> int:
        # The play's own variable (or an extra var) switches the cache off, to
        # compare: sparkctl_render_compile_cache=false.
        play_vars = self._variable_manager.get_vars(play=iterator._play)
        use_cache = boolean(play_vars.get("sparkctl_render_compile_cache", True), strict=False)
        if use_cache:
            _COMPILE_CACHE.install()
        try:
            result: int = super().run(iterator, play_context)
        finally:
            _COMPILE_CACHE.uninstall()
        return result

    def _queue_task(
        self, host: Host, task: Task, task_vars: dict[str, t.Any], play_context: PlayContext
    ) -> None:
        # What linear's _queue_task and WorkerProcess._run do, without the process:
        # the cache entry the result queue's reader looks the task up in, the
        # runner_on_start callback, the executor, and its result on the final queue.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        queue = _InlineQueue(self)
        # A worker works on its own (forked) copies; TaskExecutor templates the
        # task's attributes in place, so it gets a copy here too.
        own_task = task.copy()
        try:
            with _task.TaskContext(own_task):
                result = TaskExecutor(
                    host,
                    own_task,
                    dict(task_vars),
                    play_context,
                    self._loader,
                    plugin_loader.get_plugin_loader_namespace(),
                    queue,
                    self._variable_manager,
                ).run()
        except Exception as ex:
            result = _error_utils.result_dict_from_exception(ex)
        try:
            queue.send_task_result(
                _RawTaskResult(
                    host=host, task=own_task, return_data=result, task_fields=own_task.dump_attrs()
                )
            )
        except Exception as ex:
            # WorkerProcess._run's answer to a result that cannot be pickled.
            try:
                raise AnsibleError("Task result omitted due to queue send failure.") from ex
            except Exception as ex_wrapper:
                queue.send_task_result(
                    _RawTaskResult(
                        host=host,
                        task=own_task,
                        return_data=_error_utils.result_dict_from_exception(ex_wrapper),
                        task_fields={},
                    )
                )
        self._pending_results += 1
