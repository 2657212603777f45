"""The judged process's audit hook (PEP 578): the escape hatches a solution never needs and an
attack always does are refused to code outside the harness.

``launch.py`` installs it first thing, before pytest, the harness or anything of the
submission is imported; an audit hook cannot be removed.  What is refused, and to whom:

- the frames of other code: ``sys._getframe`` and ``sys._current_frames``, a traceback's or a
  generator's frame (``tb_frame``, ``gi_frame``, ``cr_frame``, ``ag_frame``);
- tracing and profiling: ``sys.settrace``/``setprofile`` (also through ``threading.settrace``:
  the function a new thread would install is looked at), their 3.12+ twin
  ``sys.monitoring.register_callback``, and another audit hook;
- every object in the process: ``gc.get_objects``, ``get_referrers``, ``get_referents``;
- raw memory: loading a library or a symbol through ``ctypes``, an object made at an address,
  ``addressof``, ``string_at``;
- swapping a function's code (``__code__``) or, on a function that is not the submission's own,
  its defaults;
- code compiled under the file name of the harness or the library (it would pass for theirs):
  before the learner file is imported, to code outside the harness; from then on to anyone
  (library code such as ``codeop`` compiles what it is given), unless it is that file's own
  text, read from the file (the import system compiling a module without bytecode).  The
  same for a code object made or unmarshalled with such a name (``code.__new__``,
  ``marshal.loads``: the import system's own path from a file loader only) and for
  ``_imp._fix_co_filename``, which renames a code object without an audit event (it goes
  through this hook now; so does ``_imp.create_builtin``, which would make a fresh ``_imp``);
- a process's raw memory through ``/proc`` (opening a file named ``mem``, or making a link to
  one: ``/proc/self/mem`` is ``ctypes`` without ``ctypes``).

"Outside the harness" is decided by the file of the code that asked: the staged harness and
its tests, Python's library and the installed packages are trusted; the submission's files
and code without a real file (``<string>``, ``exec``) are not.  For frames, tracing and
tracebacks the direct caller decides (``typing.TypeVar``, ``namedtuple`` and ``logging`` ask
for the caller's frame on the submission's behalf, pytest-timeout dumps every thread's stack
from a signal handler that may interrupt the submission: both fine); for the rest, where a
correct solution has no business even indirectly, the nearest frame that is not library
code decides.

Each refusal raises ``RuntimeError`` in the code that asked and is remembered: the judge
(``judge``) turns the first ones into a ``tampered`` record.  ``install`` hands its file
classifier and its refusals to ``launch``, which passes them to the judge and keeps no
reference: no Python object of the run leads back to either.
"""
from __future__ import annotations

import os
import sys
import sysconfig

#: The staged copy: ``workbook/`` and the problem's ``tests/`` beside each other.
_STAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

#: Events refused when the nearest non-library frame is not the harness's.
_INDIRECT = frozenset({
    "sys._settraceallthreads",
    "sys._setprofileallthreads", "sys.addaudithook",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata",
    "ctypes.cdata/buffer", "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at",
    "ctypes.call_function", "open", "os.symlink",
})
#: Events refused when the direct caller is not trusted.
#: (``sys.settrace``/``setprofile`` too: CPython raises them itself, from wherever the thread
#: is, when it drops a trace or profile function that raised; and ``sys._current_frames``:
#: pytest-timeout calls it from a signal handler, whose next frame is whatever ran.)
_DIRECT = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace",
                     "sys.setprofile", "sys.monitoring.register_callback", "object.__getattr__",
                     "object.__setattr__", "compile", "code.__new__", "import"})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_FUNCTION_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_RAW_MODULES = frozenset({"ctypes", "_ctypes"})
#: How many refusals are kept (each is one short line).
KEPT = 16


def library_prefixes() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib",
                                                     "platlib")}
    paths |= {os.path.realpath(p) for p in paths}
    return tuple(p.rstrip(os.sep) + os.sep for p in paths)


def install(stage: str = _STAGE):
    """Install the hook; returns ``(classify, refusals, alarm)``: the kind of a file name,
    what was refused so far, and a list where the judge puts the function each refusal
    calls (for the judge).

    The hook calls nothing the submission could have replaced: every builtin and function it
    uses is bound here, before any of its code exists, and every argument is checked to be a
    plain ``str`` (or ``bytes``, ``int``) before it is hashed or compared -- a subclass could
    run its own code in here, and from here reach the hook's frame."""
    library = library_prefixes()
    harness = tuple(os.path.join(stage, d) + os.sep for d in ("workbook", "tests"))
    trusted_files: dict[str, str] = {}
    refused: list[str] = []
    getframe = sys._getframe
    gettrace, getprofile = sys.gettrace, sys.getprofile
    modules = sys.modules
    type_, len_, tuple_, str_, bytes_, int_ = type, len, tuple, str, bytes, int
    refusal = RuntimeError
    from types import FunctionType, MethodType
    from _thread import get_ident

    def kind(filename: str) -> str:
        """"harness", "library" or "foreign" (the submission, or code without a file)."""
        if filename.startswith(harness):
            return "harness"
        if filename.startswith(library) or filename.startswith("<frozen "):
            return "library"
        return "foreign"

    def kind_of(filename: str) -> str:
        if type_(filename) is not str_:  # a str subclass could run code of its own in here
            return "foreign"
        found = trusted_files.get(filename)
        if found is None:
            found = trusted_files[filename] = kind(filename)
        return found

    def nearest(frame) -> str:
        """The kind of the nearest frame that is not library code ("library": none)."""
        while frame is not None:
            found = kind_of(frame.f_code.co_filename)
            if found != "library":
                return found
            frame = frame.f_back
        return "library"

    def names_memory(path: object) -> bool:
        """Whether ``path`` (a str or bytes: nothing else is looked at) names a file ``mem``."""
        if type_(path) is bytes_:
            return path.rstrip(b"/").rsplit(b"/", 1)[-1] == b"mem"
        return type_(path) is str_ and path.rstrip("/").rsplit("/", 1)[-1] == "mem"

    def code_of(function) -> object:
        """A plain function's (or method's) code; None for anything else."""
        if type_(function) is MethodType:
            function = function.__func__
        return function.__code__ if type_(function) is FunctionType else None

    def refuse(event: str, frame) -> None:
        where = "?"
        if frame is not None:
            filename = frame.f_code.co_filename
            if type_(filename) is str_:
                where = f"{filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        if len_(refused) < KEPT:
            refused.append(f"{event} refused to {where}")
        for raise_alarm in alarm:  # the judge's: say so now, the verdict is decided
            raise_alarm()
        raise refusal(f"workbook sandbox: {event} is not available to a submission")

    alarm: list = []  # at most one function, the judge's, called on each refusal
    busy: set[int] = set()  # threads inside the hook (its own _getframe calls)
    started: list = []      # the learner file is about to be imported (the snapshot)
    import _imp
    from importlib.machinery import ModuleSpec
    external = sys.modules["_frozen_importlib_external"]
    fix_co_filename, create_builtin = _imp._fix_co_filename, _imp.create_builtin
    get_code, compile_bytecode = external.SourceLoader.get_code.__code__, \
        external._compile_bytecode.__code__
    source_loader, code_type, list_ = external.SourceFileLoader, type(get_code), list
    os_open, os_read, os_close, read_only = os.open, os.read, os.close, os.O_RDONLY
    os_error = OSError
    named = tuple_(p.encode() for p in harness + library)  # as marshal writes a file name
    # hypothesis's ``impersonate`` (the explorers draw with it): it gives the wrapper it
    # runs a test through the test's file name, on the harness's behalf.
    impersonate_file = os.path.join(sysconfig.get_paths()["purelib"], "hypothesis",
                                    "internal", "reflection.py")

    def plain_path(name: str) -> bool:
        """No ``.``, ``..`` or empty part: the prefix says where the file really is."""
        parts = name.split("/")
        return parts[0] == "" and all(part not in ("", ".", "..") for part in parts[1:])

    def genuine(name: str, source) -> bool:
        """Whether ``source`` is the text of the file ``name`` (a harness or library file,
        which the run cannot write)."""
        if type_(source) is str_:
            source = source.encode("utf-8", "surrogateescape")
        if type_(source) is not bytes_ or not plain_path(name):
            return False
        try:
            fd = os_open(name, read_only)
        except os_error:
            return False
        try:
            chunks = []
            while True:
                chunk = os_read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os_close(fd)
        return b"".join(chunks) == source

    def by_a_file_loader(frame) -> bool:
        """Whether ``frame`` is importlib's ``_compile_bytecode`` called by the
        ``get_code`` of a plain ``SourceFileLoader`` (a module's bytecode, from its file)."""
        if frame is None or frame.f_code is not compile_bytecode:
            return False
        outer = frame.f_back
        return outer is not None and outer.f_code is get_code \
            and type_(outer.f_locals.get("self")) is source_loader

    def code_made(event: str, args: tuple) -> None:
        """Code under a harness or library name, once the run has started (see above)."""
        caller = getframe(2)
        if event in ("workbook.fix_co_filename", "workbook.create_builtin"):
            caller = caller.f_back if caller is not None else None  # past the stand-in
        if event == "workbook.fix_co_filename":
            code, path = args
            if type_(code) is not code_type or type_(path) is not str_:
                refuse(event, caller)
            if started and kind_of(path) != "foreign" and not by_a_file_loader(caller):
                refuse(event, caller)
            fix_co_filename(code, path)
        elif event == "workbook.create_builtin":
            spec, box = args
            if type_(spec) is not ModuleSpec or type_(box) is not list_:
                refuse(event, caller)
            name = spec.name
            if type_(name) is not str_ or started and name == "_imp":
                refuse(event, caller)
            box.append(create_builtin(spec))
        elif event == "marshal.loads":
            data = args[0]
            if type_(data) is bytes_ and any(p in data for p in named) \
                    and not by_a_file_loader(caller):
                refuse(event, caller)
        elif event == "marshal.load":
            refuse(event, caller)
        else:  # compile, code.__new__
            name = args[1]
            if type_(name) is bytes_:
                name = name.decode("utf-8", "surrogateescape")
            if type_(name) is not str_ or kind_of(name) == "foreign":
                return
            if event == "compile" and genuine(name, args[0]):
                return
            if event == "code.__new__" and caller is not None \
                    and caller.f_code.co_filename == impersonate_file \
                    and caller.f_code.co_name == "accept" and nearest(caller) == "harness":
                return  # hypothesis names its wrapper after the harness's test it runs
            refuse(event, caller)

    def hook(event: str, args: tuple) -> None:
        if event == "workbook.snapshot":
            started[:1] = [True]
            return
        if event in ("workbook.fix_co_filename", "workbook.create_builtin") or started and \
                event in ("compile", "code.__new__", "marshal.loads", "marshal.load"):
            return code_made(event, args)
        indirect = event in _INDIRECT
        if not indirect and event not in _DIRECT:
            return
        first = args[0] if len_(args) > 0 else None
        if event in ("object.__getattr__", "object.__setattr__"):
            name = args[1]
            if type_(name) is not str_ or name not in (
                    _FRAME_ATTRIBUTES if event == "object.__getattr__"
                    else _FUNCTION_ATTRIBUTES):
                return
        elif event == "import":
            if type_(first) is str_ and (first not in _RAW_MODULES or first in modules):
                return
        elif event == "open":
            if type_(first) in (str_, bytes_, int_) and not names_memory(first):
                return
        elif event == "os.symlink":
            if not names_memory(first):
                return
        ident = get_ident()
        if ident in busy:
            return
        busy.add(ident)
        try:
            caller = getframe(1)  # the Python code that raised the event
            if event == "import":  # through importlib's frozen frames
                while caller is not None and kind_of(caller.f_code.co_filename) == "library" \
                        and caller.f_code.co_filename.startswith("<frozen "):
                    caller = caller.f_back
            if event in ("compile", "code.__new__"):
                name = args[1]
                if type_(name) is bytes_:
                    name = name.decode("utf-8", "surrogateescape")
                if type_(name) is str_ and kind_of(name) == "foreign":
                    return  # code under a name of its own: the submission's, as it says
            if event == "object.__setattr__" and args[1] != "__code__":
                code = code_of(first)  # the submission's own defaults
                if code is not None and kind_of(code.co_filename) == "foreign":
                    return
            if indirect:
                verdict = nearest(caller)
            else:
                verdict = "foreign" if caller is None else kind_of(caller.f_code.co_filename)
            if verdict == "foreign" and event in ("sys.settrace", "sys.setprofile"):
                # CPython raises this event itself when it drops a hook that raised, from
                # whatever frame runs then (the harness's profile hooks raise on purpose,
                # inside the submission's waits): a change to a hook the harness or the
                # library installed in this thread is theirs to make.
                code = code_of((gettrace if event == "sys.settrace" else getprofile)())
                if code is not None and kind_of(code.co_filename) != "foreign":
                    verdict = "harness"
            if verdict == "library" and event in ("sys.settrace", "sys.setprofile") \
                    and caller.f_code.co_filename == threading_file:
                # A thread starting with threading.settrace's function: whose is it?
                for key in threading_globals:  # plain names only, before looking one up
                    if type_(key) is not str_:
                        refuse(event, caller)
                code = code_of(threading_globals.get(
                    "_trace_hook" if event == "sys.settrace" else "_profile_hook"))
                if code is not None:
                    verdict = kind_of(code.co_filename)
            if verdict == "foreign":
                refuse(event, caller)
        finally:
            busy.discard(ident)

    import threading
    threading_file, threading_globals = threading.__file__, vars(threading)
    sys.addaudithook(hook)
    _route_imp(sys.audit)
    _print_in_python()
    return kind_of, lambda: tuple_(refused), alarm


def _print_in_python() -> None:
    """Exceptions nobody catches are printed by the ``traceback`` module, not by C.

    To place its carets, CPython's own printer (the default ``sys.unraisablehook`` and
    ``sys.excepthook``, on 3.11 and 3.12) parses the failing segment of each line under that
    line's file name: a compile event under a harness or library name, raised from whatever
    Python frame runs at that moment.  An exception ignored in a library's ``__del__`` or
    at-fork handler would then be refused as the submission compiling code under a harness
    name (a fork-bomb file, interrupted by the import watch inside ``logging``'s at-fork
    handler, was graded tampered instead of spinning).  The module parses its segments under
    the name ``<unknown>``; the text is the same."""
    import traceback

    def unraisable(info) -> None:
        try:
            where = "" if info.object is None else f": {info.object!r}"
        except Exception:  # noqa: BLE001 - as CPython does with a repr that raises
            where = ": <object repr() failed>"
        text = f"{info.err_msg or 'Exception ignored in'}{where}\n"
        if info.exc_type is not None:
            text += "".join(traceback.format_exception(info.exc_type, info.exc_value,
                                                       info.exc_traceback))
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - nowhere left to say it
            pass

    def excepthook(kind, value, tb) -> None:
        sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))

    sys.unraisablehook, sys.excepthook = unraisable, excepthook


def _route_imp(audit) -> None:
    """``_imp``'s two functions that make or rename code without an audit event, replaced by
    ones that raise one (the guard's hook does the work and holds the originals: no Python
    object leads to them); a ``box`` carries a result back."""
    import _imp

    def _fix_co_filename(code, path):
        audit("workbook.fix_co_filename", code, path)

    def create_builtin(spec):
        box: list = []
        audit("workbook.create_builtin", spec, box)
        return box[0]

    _imp._fix_co_filename, _imp.create_builtin = _fix_co_filename, create_builtin
