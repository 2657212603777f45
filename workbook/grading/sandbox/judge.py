"""The judge's core inside the judged process, where the learner's code cannot reach it.

Everything a forged report would need lives here, in closures that only an audit hook
refers to (the interpreter keeps the hook; no Python object leads to it): the signing key
(read from its pipe before pytest is imported, kept only as two SHA-256 states), the record
counter, pytest's own verdict on each test, and the snapshot of what the verdict depends on.
The harness talks to it through audit events (``sys.audit``):

- ``workbook.report(event, body, nodeid)``: sign and send one record (``body``: its JSON).
  With every test, collection and end record the snapshot is compared first and a
  ``Tampered`` record goes ahead of it if anything changed; a test record carries pytest's
  own verdict, signed beside it (never the body's), and every record the process's clock and
  CPU time when it left.
- ``workbook.report("note", text, checkpoint)``: a note, from anywhere (it earns nothing).
  The judge writes the record itself from the text (a ``str``, cut to ``NOTE_MAX``
  characters): a note is never anything but a ``Note``, and at most ``NOTES_PER_TEST`` go
  per test (one more says how many were not sent).
- ``workbook.verdict(nodeid)``: pytest saw this test fail; ``workbook.running(nodeid)``:
  pytest starts this test (the only test a test record may be about, once).
- ``workbook.snapshot(modules, plugins)`` and ``workbook.items(items)``: take the snapshot
  (once, before the learner file is imported) and add the collected tests' functions to it.

Every event but a note is accepted only on the main thread, from the one path that makes it
(``ROUTES``: the reporter's and the harness plugin's own functions, frame by frame, called
by pluggy), told apart by the identity of their code objects, taken before any learner code
existed -- never by a file name, which code compiled by the submission can choose; and
only from a stack with no frame of the submission's, nor one that claims a harness file
without being the harness's code.  Anything else is refused (it raises, and the row is
``tampered``): a thread, a signal handler, an ``atexit`` or garbage-collector callback made
of C callables that calls the harness's emitter has no such path.  A refusal of the guard's
(``guard.install``'s ``alarm``) sends the integrity record at once, from the thread that
asked: the row is decided, and the grader stops the run when it reads that record.

The comparison is written so that it calls no code that could be the
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
#: A note's longest text (characters) and the most notes sent per test.
NOTE_MAX, NOTES_PER_TEST = 500, 10
#: The path of each event, from the function that calls ``sys.audit`` outward: each step
#: ``(module, function)`` (``Class.method`` for a method); "pluggy" is any function of
#: pluggy's, which calls a hook implementation.  ``report KIND`` for a record of that kind.
_EMIT = (("workbook.grading.sandbox.reporter", "_send"),
         ("workbook.grading.sandbox.reporter", "Reporter.emit"), ("workbook.plugin", "_emit"))
ROUTES = {
    "workbook.snapshot": (*_EMIT[1:], ("workbook.plugin", "pytest_configure"), "pluggy"),
    "report start": (*_EMIT, ("workbook.plugin", "pytest_configure"), "pluggy"),
    "report import_error": (*_EMIT, ("workbook.plugin", "_load_target"),
                            ("workbook.plugin", "pytest_configure"), "pluggy"),
    "report collected": (*_EMIT, ("workbook.plugin", "pytest_collection_modifyitems"),
                         "pluggy"),
    "report item": (_EMIT[0], ("workbook.grading.sandbox.reporter",
                               "pytest_collection_finish"), "pluggy"),
    "report test": (*_EMIT, ("workbook.plugin", "pytest_runtest_protocol"), "pluggy"),
    "report end": (*_EMIT, ("workbook.plugin", "pytest_sessionfinish"), "pluggy"),
    "workbook.items": (("workbook.grading.sandbox.reporter", "pytest_collection_finish"),
                       "pluggy"),
    "workbook.verdict": (("workbook.grading.sandbox.reporter", "pytest_runtest_logreport"),
                         "pluggy"),
    "workbook.running": (("workbook.grading.sandbox.reporter", "pytest_runtest_logstart"),
                         "pluggy"),
}


def code_objects(values) -> list:
    """Every code object of ``values``'s functions (and of the classes' methods, properties
    and the functions they wrap), nested ones included."""
    from types import CodeType, FunctionType
    out, seen = [], set()

    def add(code) -> None:
        if id(code) not in seen:
            seen.add(id(code))
            out.append(code)
            for const in code.co_consts:
                if type(const) is CodeType:
                    add(const)

    def visit(value, depth: int) -> None:
        if type(value) is FunctionType:
            add(value.__code__)
            wrapped = vars(value).get("__wrapped__")
            if wrapped is not None and depth < 3:
                visit(wrapped, depth + 1)
        elif type(value) in (staticmethod, classmethod):
            visit(value.__func__, depth)
        elif type(value) is property:
            for part in (value.fget, value.fset, value.fdel):
                visit(part, depth)
        elif isinstance(value, type) and depth < 2:
            for member in list(vars(value).values()):
                visit(member, depth + 1)

    for value in values:
        visit(value, 0)
    return out


def resolve(routes: dict, frame) -> tuple[dict, frozenset, list]:
    """``routes`` as sets of code ids per step, the ids of every harness code object (its
    modules' and the stack's at ``frame``), and the code objects themselves (kept: an id is
    only unique while its object lives).  Called once, before any learner code exists."""
    modules = sys.modules
    pluggy = code_objects(value for name, module in list(modules.items())
                          if name == "pluggy" or name.startswith("pluggy.")
                          for value in list(vars(module).values()))
    harness = code_objects(value for name, module in list(modules.items())
                           if name.startswith(("workbook.", "tests."))
                           and module is not None for value in list(vars(module).values()))
    while frame is not None:  # the launcher's own (``__main__``) and whatever ran it
        harness.append(frame.f_code)
        frame = frame.f_back

    def step(where):
        if where == "pluggy":
            return frozenset(id(code) for code in pluggy)
        module, name = where
        value = modules[module]
        for part in name.split("."):
            value = vars(value)[part]
        return frozenset({id(value.__code__)})

    resolved = {event: tuple(step(where) for where in path) for event, path in routes.items()}
    return resolved, frozenset(id(code) for code in harness), pluggy + harness


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


def install(classify, refusals, report_fd: int, key_fd: int, routes: dict = ROUTES,
            alarm: list | None = None) -> None:
    """Read the key and arm the audit hook (see the module's docstring).  ``classify``: the
    guard's "harness"/"library"/"foreign" of a file name; ``refusals``: what it refused;
    ``routes``: the path of each event (``ROUTES``; resolved at the first event);
    ``alarm``: the guard's list of what to call on a refusal (the integrity record, sent at
    once: the grader then stops the run, whose verdict is decided)."""
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
                        "workbook.items", "workbook.running"})
    main_thread, get_ident, id_ = _thread.get_ident(), _thread.get_ident, id
    resolve_, note_max, notes_max = resolve, NOTE_MAX, NOTES_PER_TEST
    paths: dict = {}      # "routes", "harness", "kept": ``resolve``'s, at the first event
    tests: dict = {"running": None, "notes": 0, "dropped": 0, "checkpoint": None}
    reported: set = set()  # node ids a test record has been sent for

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
        """Whether any frame of the stack that asked is the submission's, or claims a file
        of the harness without being the harness's code."""
        frame = getframe(2)
        harness = paths["harness"]
        while frame is not None:
            kind = classify(frame.f_code.co_filename)
            if kind == "foreign" or kind == "harness" and id_(frame.f_code) not in harness:
                return True
            frame = frame.f_back
        return False

    def off_route(route) -> bool:
        """Whether the stack that asked departs from ``route`` (or this is not the main
        thread)."""
        if get_ident() != main_thread:
            return True
        frame = getframe(2)
        for step in route:
            if frame is None or id_(frame.f_code) not in step:
                return True
            frame = frame.f_back
        return False

    def note(text, checkpoint):
        """A note's record, written here; at most ``notes_max`` a test."""
        if type_(text) is not str_ or checkpoint is not None and type_(checkpoint) is not str_:
            return
        if tests["notes"] >= notes_max:
            tests["dropped"] += 1
            tests["checkpoint"] = checkpoint
            return
        tests["notes"] += 1
        send("-", '{"event":"note","checkpoint":' + (
            "null" if checkpoint is None else quote(checkpoint[:100]))
            + ',"text":' + quote(text[:note_max]) + "}")

    def notes_done():
        """Before a test's record (or the end): how many notes were not sent, then count
        again."""
        if tests["dropped"]:
            dropped, tests["notes"], tests["dropped"] = tests["dropped"], 0, 0
            note(f"({dropped} more notes not sent)", tests["checkpoint"])
        tests["notes"] = 0

    def refuse(event):
        refused[:1] = [f"{event} asked for by the submission's code"]
        raise refusal(f"workbook sandbox: {event} is not available to a submission")

    def tampered():
        changed = state.get("changed")
        found = tuple_(refusals()) + tuple_(refused) + (changed() if changed is not None
                                                         else ())
        if found:
            shown = found[:8] + ((f"and {len_(found) - 8} more",) if len_(found) > 8 else ())
            send("-", '{"event":"integrity","changed":[' + ",".join(map_(quote, shown)) + "]}")

    def refused_now():
        if not alarmed:
            alarmed.append(True)
            tampered()

    alarmed: list = []
    if alarm is not None:
        alarm[:] = [refused_now]

    def hook(event, args):
        if event not in events:
            return
        for arg in args:  # compared and hashed below: plain values only
            if type_(arg) not in plain:
                refused[:1] = [f"{event} with an object of its own"]
                raise refusal(f"workbook sandbox: {event} with an object of its own")
        if event == "workbook.report" and args[0] == "note":
            if len_(args) == 3:
                note(args[1], args[2])
            return
        if "routes" not in paths:  # the first event: no learner code exists yet
            paths["routes"], paths["harness"], paths["kept"] = resolve_(routes, getframe(1))
        route = paths["routes"].get(event if event != "workbook.report" or type_(args[0])
                                    is not str_ else "report " + args[0])
        if route is None or off_route(route) or submissions_stack():
            refuse(event)
        if event == "workbook.verdict":
            failed.add(args[0])
        elif event == "workbook.running":
            tests["running"] = args[0]
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
            if kind == "test":  # about the test pytest runs now, once
                if nodeid != tests["running"] or nodeid in reported:
                    refuse(f"{event} of a test that is not running")
                reported.add(nodeid)
            if kind in ("test", "end"):
                notes_done()
            if kind in ("collected", "test", "end"):
                tampered()
            verdict = "-" if kind != "test" else "failed" if nodeid in failed else "passed"
            send(verdict, body)

    sys.addaudithook(hook)
