"""ATC-style errors: a code, a message with the values, and a suggested solution.

Every user mistake surfaces as an `AtcError`; the CLI prints it the way ATC does and
exits non-zero.  Codes follow ATC's families: E10xxx for parameters and inputs,
E16xxx for graph problems found while parsing, E19999 for internal errors.

Who decides which: an op's shape rule or kernel raises `InvalidNode` (E16004) when the
node's attributes or input shapes are wrong -- the user's model.  Any other exception out
of a rule or kernel is a bug in atc_py: the stage that called it raises `InternalError`
(E19999) naming the node, `from` the original exception, never the reverse.
"""
from __future__ import annotations

from om_format.errors import OmFormatError


def _rebuild_error(cls, args: tuple, state: dict) -> "AtcError":
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class AtcError(Exception):
    """A user-facing error with an ATC error code."""

    def __init__(self, code: str, message: str, solution: str = ""):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.solution = solution

    def __reduce__(self):
        """Copy and pickle by state, whatever a subclass's __init__ takes (copy.copy, and any
        caller that sends errors between processes; runner.run_many's workers send theirs
        without pickle, as `error_name` and fields, simulator/workers.py)."""
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))

    def render(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.solution:
            text += f"\n        Solution: {self.solution}"
        return text


def error_name(cls: type) -> str:
    """The name `rebuild_error` finds an error class by: module and qualified name."""
    return f"{cls.__module__}.{cls.__qualname__}"


def rebuild_error(name: str, code: str, message: str, solution: str, state: dict) -> AtcError:
    """The error of the class named `name` (`error_name`) with these fields and `state` (its other
    attributes, InternalError's node), rebuilt without pickle and without importing anything:
    the class is looked up among the AtcError subclasses already loaded -- a forked worker's
    parent has them all -- and AtcError itself stands in for a name that is not one of them."""
    classes, todo = {error_name(AtcError): AtcError}, [AtcError]
    while todo:
        for sub in todo.pop().__subclasses__():
            classes.setdefault(error_name(sub), sub)
            todo.append(sub)
    fields = {"code": code, "message": message, "solution": solution}
    return _rebuild_error(classes.get(name, AtcError), (f"{code}: {message}",), {**state, **fields})


class InvalidNode(AtcError):
    """E16004: a node's attributes or input shapes are invalid for its op.  Shape rules and
    kernels raise it for what the model got wrong; the caller names the node (`at_node`)."""

    def __init__(self, message: str, solution: str = "Check the node's attributes and input shapes."):
        super().__init__("E16004", message, solution)


class InternalError(AtcError):
    """A bug in atc_py, not a problem of the user's model: always E19999.  Raised where an
    invariant the code relies on is broken (instead of `assert`, which `python -O` strips),
    and where an unexpected exception escapes a stage: `raise InternalError(...) from exc`
    keeps the cause.  `node` names the node being processed, when there is one."""

    def __init__(self, message: str, node: str = ""):
        where = f"Node [{node}]: " if node and f"[{node}]" not in message else ""
        super().__init__("E19999", where + message,
                         "This is a bug in atc_py, not in your model: please report it with the model.")
        self.node = node


def invalid_param(value, param: str, reason: str, solution: str = "") -> AtcError:
    """E10001, ATC's message for a parameter with an invalid value."""
    return AtcError("E10001", f"Value [{value}] for parameter [{param}] is invalid. Reason: {reason}",
                    solution or f"Try 'atc --help' for the values {param} accepts.")


def invalid_attr(op_type: str, attr: str, value, reason: str, solution: str = "") -> InvalidNode:
    """E16004: a node attribute the converter cannot honour (a graph problem, not a CLI one)."""
    return InvalidNode(f"Op [{op_type}] has attribute [{attr}] = [{value}] which is invalid. Reason: {reason}",
                       solution or f"Fix the {op_type} node in the ONNX model or re-export it.")


def at_node(err: AtcError, name: str, op_type: str) -> AtcError:
    """The same error (same class and code), saying which node it came from (kernels do not
    know their node)."""
    if f"[{name}]" in err.message:
        return err
    named = type(err).__new__(type(err))         # copy.copy would call __init__ with args (code, message)
    named.__dict__.update(err.__dict__)
    named.message = f"Node [{name}] ({op_type}): {err.message}"
    named.args = (f"{err.code}: {named.message}",)
    return named


OM_SOLUTION = "The file is not a valid .om model or is damaged: regenerate it with atc."


def om_format_error(exc: OmFormatError) -> AtcError:
    """E10003 for a damaged .om (raise it `from exc`, so the format layer's cause stays)."""
    return AtcError("E10003", exc.message, exc.solution or OM_SOLUTION)


class AtcWarning:
    """A user-facing warning with an atc_py W-code: the run goes on, the user is told what
    was ignored or changed and why.  The codes are atc_py's own (W10100 ...), listed in
    README.md; ATC prints its warnings the same way: code, message."""

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message

    def render(self) -> str:
        return f"{self.code}: {self.message}"

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"AtcWarning({self.code!r}, {self.message!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, AtcWarning) and (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))
