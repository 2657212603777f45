"""The judge's core inside the judged process, where the learner's code cannot reach it.

Everything a forged report would need lives here, in closures that only an audit hook
refers to (the interpreter keeps the hook; no Python object leads to it): the signing key
(read from its pipe before pytest is imported, kept only as two SHA-256 states), the record
counter, pytest's own verdict on each test, and the snapshot of what the verdict depends on.
The harness talks to it through audit events (``sys.audit``):

- ``workbook.report(event, body, nodeid)``: sign and send one record (``body``: its JSON).
  Accepted only from a stack with no frame of the submission's (a note, which earns nothing,
  from anywhere).  With every test, collection and end record the snapshot is compared
  first and a ``Tampered`` record goes ahead of it if anything changed; a test record carries
  pytest's own verdict, signed beside it (never the body's), and every record the process's
  clock and CPU time when it left.
- ``workbook.verdict(nodeid)``: pytest saw this test fail (trusted stack only).
- ``workbook.snapshot(modules, plugins)`` and ``workbook.items(items)``: take the snapshot
  (once, before the learner file is imported) and add the collected tests' functions to it.

A report asked for by the submission's code is refused (it raises, and the row is
``tampered``).  The comparison is written so that it calls no code that could be the
submission's: only C functions bound before any learner code ran, after checking that every
key it looks up by is a plain ``str``.  What still reaches it is raw memory; see the README.
"""
from __future__ import annotations

import sys

#: Names a harness module may gain during a run (the warnings machinery's registry).
ADDED_BY_PYTHON = frozenset({"__warningregistry__"})
#: Module attributes that pytest itself rebinds during a run (around every test, its
#: thread-exception and unraisable-exception plugins).
REBOUND = frozenset({"threading.excepthook", "sys.unraisablehook"})
#: The kinds of constants compared by value in the harness's and the acceptance set's modules.
CONSTANTS = (int, float, str, bytes, tuple, frozenset)


def snapshot(modules: tuple[str, ...], plugins, shallow: tuple[str, ...] = ()):
    """Take a snapshot of ``modules`` (names in ``sys.modules``) and of ``plugins``'s hook
    implementations now; returns ``changed()``, which names what no longer holds: anything
    replaced, changed in place (the harness's constants and code, by value), a name added to
    one of their namespaces, a hook implementation added from outside the harness and
    Python's library, and (``changed.add_items``) a collected test whose function was
    swapped.  Harness modules (``workbook.*``, ``tests.*``) are guarded whole: every value
    by identity, not only their functions; ``shallow`` modules by their own names only."""
    import functools
    import marshal
    from types import CodeType, FunctionType, ModuleType
    from pluggy._hooks import HookCaller, HookImpl, _SubsetHookCaller
    # Every name the comparison uses is bound here, before any learner code exists: it runs
    # later, when the submission may have replaced any builtin or module attribute.
    type_, str_, list_, tuple_, frozenset_ = type, str, list, tuple, frozenset
    vars_, getattr_, callable_, isinstance_, len_ = vars, getattr, callable, isinstance, len
    value_error, added_by_python, id_ = ValueError, ADDED_BY_PYTHON, id
    builtin_names = frozenset_(vars_(sys.modules["builtins"]))
    dumps, partial, caller_types = marshal.dumps, functools.partial, (HookCaller,
                                                                      _SubsetHookCaller)
    kept_kinds = (property, staticmethod, classmethod)
    places = []      # (label, lookup, key, object): lookup(key) is object until replaced
    values = []      # (label, lookup, key, marshal of the value)
    spaces = []      # (label, namespace, its names then)
    items = []       # (nodeid, the item's __dict__, the function pytest will call)
    relay = plugins.hook

    def dumped(value):
        try:
            return dumps(value, 2)
        except value_error:  # holds something marshal cannot write: identity only
            return None

    def place(label, lookup, key, value, harness):
        places.append((label, lookup, key, value))
        if harness and isinstance_(value, (*CONSTANTS, CodeType)):
            values.append((label, lookup, key, dumped(value)))
        if type_(value) is FunctionType:
            attribute = partial(getattr_, value)
            for name in ("__code__", "__defaults__"):
                inner = getattr_(value, name)
                places.append((f"{label}.{name}", attribute, name, inner))
                if harness and name == "__code__":
                    values.append((f"{label}.__code__", attribute, name, dumped(inner)))

    for module_name in modules + shallow:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        harness = module_name.startswith(("workbook.", "tests."))
        deep = module_name not in shallow
        namespace = vars_(module)
        places.append((module_name, sys.modules.get, module_name, module))
        spaces.append((module_name, namespace, frozenset_(namespace), harness))
        for name, value in list_(namespace.items()):
            label = f"{module_name}.{name}"
            if label in REBOUND or not (harness or callable_(value)
                                        or isinstance_(value, kept_kinds)):
                continue
            if not deep:
                places.append((label, namespace.get, name, value))
                continue
            place(label, namespace.get, name, value, harness)
            if isinstance_(value, type) and value.__module__ == module_name:
                members = vars_(value)
                if harness:  # a library class may gain a flag or a cache (pytest's do)
                    spaces.append((label, members, frozenset_(members), True))
                for attr, member in list_(members.items()):
                    if callable_(member) or isinstance_(member, kept_kinds) \
                            or harness and isinstance_(member, CONSTANTS):
                        place(f"{label}.{attr}", members.get, attr, member, harness)

    def hooks_now(odd):
        """``hook NAME PLUGIN -> function`` read straight from pluggy's slots."""
        found = {}
        for name, caller in list_(vars_(relay).items()):
            if type_(name) is not str_ or type_(caller) not in caller_types:
                odd.append("a hook caller that is not pluggy's")
                continue
            impls = getattr_(caller, "_hookimpls")
            if type_(impls) is not list_:
                odd.append(f"hook {name} (its list replaced)")
                continue
            for impl in impls:
                plugin = getattr_(impl, "plugin_name") if type_(impl) is HookImpl else None
                if type_(plugin) is not str_:
                    odd.append(f"hook {name} (an implementation that is not pluggy's)")
                    continue
                found[f"hook {name} {plugin}"] = getattr_(impl, "function")
        return found

    hooks = hooks_now([])

    def trusted(function):
        code = getattr_(function, "__code__", None)
        filename = getattr_(code, "co_filename", None)
        return type_(filename) is str_ and not filename.startswith("<") and (
            filename.startswith(harness_prefixes) or filename.startswith(library_prefixes))

    from workbook.grading.sandbox.guard import library_prefixes as _library
    library_prefixes = _library()
    stage = sys.modules["workbook"].__path__[0].rsplit("/", 1)[0]
    harness_prefixes = (stage + "/workbook/", stage + "/tests/")

    def changed():
        # First: every key a lookup compares with is a plain str (another object's __eq__
        # would run the submission's code in here); nothing else is looked at otherwise.
        for label, namespace, _, _ in spaces:
            for key in namespace:
                if type_(key) is not str_:
                    return (f"{label} (a key that is not a name)",)
        for nodeid, found, _ in items:
            for key in found:
                if type_(key) is not str_:
                    return (f"test {nodeid} (a key that is not a name)",)
        out = [label for label, lookup, key, was in places if lookup(key) is not was]
        out += [f"{label} (in place)" for label, lookup, key, data in values
                if dumped(lookup(key)) != data]
        for label, namespace, names, harness in spaces:  # the library's modules may gain
            out += [f"{label}.{name} (added)" for name in namespace.keys() - names  # names,
                    if (harness or name in builtin_names)  # not one that shadows a builtin
                    and name not in added_by_python and type_(namespace[name]) is not ModuleType]
        out += strays + [f"test {nodeid} (its function swapped)"
                         for nodeid, found, function in items
                         if found.get("_obj") is not function or "runtest" in found]
        odd = []
        now = hooks_now(odd)
        out += odd + [name for name, was in hooks.items() if now.get(name) is not was]
        out += [name for name, function in now.items()
                if name not in hooks and not trusted(function)]
        return tuple_(out)

    # The acceptance set's test functions as they were before any learner code ran: what a
    # collected test may call.
    test_functions = frozenset_(id_(value) for label, _, _, value in places
                                if type_(value) is FunctionType and label.startswith("tests."))
    strays = []  # collected tests whose function is not one of those

    def add_items(collected):
        """``collected``: ``(node id, item)`` of every collected test, in run order."""
        for pair in collected:
            if type_(pair) is tuple_ and len_(pair) == 2 and type_(pair[0]) is str_:
                found = vars_(pair[1])
                items.append((pair[0], found, found.get("_obj")))
                if id_(found.get("_obj")) not in test_functions:
                    strays.append(f"test {pair[0]} (not the acceptance set's function)")

    changed.add_items = add_items
    return changed


def install(classify, refusals, report_fd: int, key_fd: int) -> None:
    """Read the key and arm the audit hook (see the module's docstring).  ``classify``: the
    guard's "harness"/"library"/"foreign" of a file name; ``refusals``: what it refused."""
    import _json
    import hashlib
    import itertools
    import os
    import _thread
    key = os.read(key_fd, 64)
    os.close(key_fd)
    block = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))  # HMAC-SHA256, split in two
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))
    del key, block
    import time
    write, quote, getframe = os.write, _json.encode_basestring_ascii, sys._getframe
    monotonic, cputime = time.monotonic, time.process_time
    type_, str_, tuple_, len_, map_, next_ = type, str, tuple, len, map, next
    refusal, os_error = RuntimeError, OSError
    from _pytest.config import PytestPluginManager
    plain = (str, tuple, type(None), PytestPluginManager)  # what the events carry
    counter = itertools.count()
    lock = _thread.allocate_lock()  # one record at a time: its number, then its write
    failed: set = set()             # node ids pytest saw fail
    refused: list = []              # what the submission's code asked for and was refused
    state: dict = {}                # "changed": the snapshot's comparison, once taken
    events = frozenset({"workbook.report", "workbook.verdict", "workbook.snapshot",
                        "workbook.items"})

    def line(seq, verdict, body):
        # The run's clock and CPU when the record left, signed with it, for the grader's
        # comparison with what it saw from outside (``outside``).
        text = f"{seq} {verdict} {monotonic():.6f} {cputime():.6f} {body}".encode()
        digest = inner.copy()
        digest.update(text)
        mac = outer.copy()
        mac.update(digest.digest())
        return f"\n{mac.hexdigest()} {text.decode()}\n".encode()

    def send(verdict, body):
        with lock:
            try:
                write(report_fd, line(next_(counter), verdict, body))
            except os_error:
                pass  # the pipe was closed by the run: what follows is lost (incomplete)

    def submissions_stack():
        """Whether any frame of the stack that asked is the submission's."""
        frame = getframe(2)
        while frame is not None:
            if classify(frame.f_code.co_filename) == "foreign":
                return True
            frame = frame.f_back
        return False

    def tampered():
        changed = state.get("changed")
        found = tuple_(refusals()) + tuple_(refused) + (changed() if changed is not None
                                                         else ())
        if found:
            shown = found[:8] + ((f"and {len_(found) - 8} more",) if len_(found) > 8 else ())
            send("-", '{"event":"integrity","changed":[' + ",".join(map_(quote, shown)) + "]}")

    def hook(event, args):
        if event not in events:
            return
        for arg in args:  # compared and hashed below: plain values only
            if type_(arg) not in plain:
                refused[:1] = [f"{event} with an object of its own"]
                raise refusal(f"workbook sandbox: {event} with an object of its own")
        if event == "workbook.report" and args[0] == "note" and type_(args[1]) is str_:
            send("-", args[1])
            return
        if submissions_stack():
            refused[:1] = [f"{event} asked for by the submission's code"]
            raise refusal(f"workbook sandbox: {event} is not available to a submission")
        if event == "workbook.verdict":
            failed.add(args[0])
        elif event == "workbook.snapshot":
            if "changed" not in state:
                state["changed"] = snapshot(*args)
        elif event == "workbook.items":
            if "changed" in state:
                state["changed"].add_items(args[0])
        else:
            kind, body, nodeid = args
            if type_(kind) is not str_ or type_(body) is not str_:
                return
            if kind in ("collected", "test", "end"):
                tampered()
            verdict = "-" if kind != "test" else "failed" if nodeid in failed else "passed"
            send(verdict, body)

    sys.addaudithook(hook)
