"""What the checks know of a target, of any kind: a frozen ``Target``, its forward's
``Param``\\ s, and the ``Capability``\\ s that decide which checks apply (docs/contributing.md)."""
from __future__ import annotations

import enum
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gradverify.results import Location

if TYPE_CHECKING:
    from gradverify.targets.holders import Holder

MISSING = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    name: str
    default: Any = MISSING
    annotation: Any = MISSING
    kind: str = "positional"  # positional | var_positional | keyword_only | var_keyword

    @property
    def required(self) -> bool:
        return self.default is MISSING and self.kind == "positional"


class Capability(enum.Enum):
    """What a target has that some checks need. A check declares the ones it needs
    (``Check.needs``); a target that lacks one gets a skipped row that says why, in the words
    of its kind (``gradverify.targets.why_lacking``), naming the kinds that have it. Each member's
    value is its own name: members with equal values would be one member under several names
    (and one kind's reason for lacking one would be given for all of them)."""

    OWN_AUTOGRAD = "own_autograd"
    """It is differentiated as a whole, by its own formula or kernel, not through what it
    calls (plain functions and modules are)."""
    OWN_BACKWARD = "own_backward"
    """A backward of its own that the checks can call raw."""
    CLASS_SOURCE = "class_source"
    """A class whose source defines forward and backward (read by the static checks), called
    as ``Cls.apply``."""
    OWN_CTX = "own_ctx"
    """A ctx on which forward (or an op's setup_context) saves tensors for its backward."""
    FORWARD_AD = "forward_ad"
    """Can define its own forward-mode formula (jvp)."""
    SCHEMA = "schema"
    """An operator schema: declared mutations, opcheck, register_vmap."""
    PARAMETERS = "parameters"
    """Built from ``init_args``; its parameters are differentiable inputs."""
    KEYWORDS = "keywords"
    """Called with its keyword-only arguments by name (a Function's apply takes none)."""
    TRITON = "triton"
    """Its forward or backward launches Triton kernels (``targets.triton_launches``): tile
    boundaries to try."""


@dataclass(frozen=True)
class Formula:
    """A target's own autograd formula, as its kind found it: an autograd.Function's, or the
    one a custom op registers with ``register_autograd``. Checks that call or read backward
    ask for it (``target.detail(Formula)``)."""

    style: str
    """``ctx`` (forward(ctx, ...)), ``setup_context`` or ``register_autograd``."""
    once_differentiable: bool = False
    """backward is ``@once_differentiable``: double backward is declared unsupported."""
    has_jvp: bool = False
    """It defines its own forward-mode formula."""
    backward_arity: int | None = None
    """Number of gradient parameters backward takes; None when it takes ``*grads``."""
    uses_mark_dirty: bool = False


@dataclass(frozen=True)
class Schema:
    """An operator schema: a custom op's ``OpOverload`` and what it declares."""

    op: Any
    mutates: tuple[str, ...] = ()
    """The arguments the schema declares it writes to."""

    @property
    def name(self) -> str:
        """``namespace::op``."""
        return str(self.op._name)

    @property
    def short_name(self) -> str:
        """The op's own name, without its namespace: ``op`` of ``namespace::op``."""
        return self.name.split("::")[-1]


@dataclass(frozen=True)
class Built:
    """A target built from the spec's ``init_args`` (a module): the instance, and the names
    of its parameters, which are inputs of every case after forward's own."""

    instance: Any
    parameters: tuple[str, ...] = ()
    init_args: Mapping[str, Any] = field(default_factory=dict)
    """What it was built from (``cls(**init_args)``)."""


D = TypeVar("D")


@dataclass(frozen=True)
class Target:
    """Everything the checks need to know about a target, found once by its kind's module
    (``gradverify.targets``): a core that every kind has, and ``details``, typed values that
    some kinds have (``Formula``, ``Schema``, ``Built``; a new kind may bring its own), read
    with ``detail``. The checks call every kind through one door, ``function.apply(*values)``."""

    function: Any
    """The autograd.Function class; for another kind, an adapter with the same door: ``apply``,
    ``forward`` (the user's code) and, where the target has one, ``backward``."""
    target: str
    """How the user named it, normalised (``pkg.mod:Class``)."""
    params: tuple[Param, ...]
    """forward's parameters, without ctx (a module's parameters last: ``Built``)."""
    forward_location: Location | None
    """Forward's ``def`` (an op's implementation): where a finding about outputs points."""
    backward_location: Location | None
    """Backward's ``def`` (None for a target without one of its own)."""
    source_file: str | None
    kind: str
    """Its kind's name, for messages: ``autograd.Function``, ``custom op``, ``function`` or
    ``module``. What a check may do with a target is decided by ``capabilities``."""
    capabilities: frozenset[Capability]
    called: str
    """How a message names the call of it: ``Name.forward`` or ``name``."""
    vmap: str | None = None
    """How it supports vmap: ``generate_vmap_rule``, ``staticmethod``, ``register_vmap`` or
    None (through what it calls)."""
    list_inputs: bool = False  # autograd differentiates it through its lists' tensors
    details: tuple[Any, ...] = ()
    """What its kind knows beyond the core, one value of each type (``detail``)."""

    def detail(self, kind_of_detail: type[D]) -> D | None:
        """Its detail of this type (its ``Formula``, ``Schema``, ...), or None."""
        return next((d for d in self.details if isinstance(d, kind_of_detail)), None)

    def need(self, kind_of_detail: type[D]) -> D:
        """Its detail of this type, which a check that needs the capability it goes with
        (``Schema``: ``SCHEMA``) may count on."""
        found = self.detail(kind_of_detail)
        assert found is not None, f"{self.target} has no {kind_of_detail.__name__}"
        return found

    @property
    def name(self) -> str:
        return str(self.function.__qualname__)

    @property
    def once_differentiable(self) -> bool:
        """Whether its own backward declares double backward unsupported."""
        formula = self.detail(Formula)
        return formula is not None and formula.once_differentiable

    @property
    def parameters(self) -> tuple[str, ...]:
        """The inputs that are its own parameters (a built module's), the last of ``params``."""
        built = self.detail(Built)
        return built.parameters if built is not None else ()

    @property
    def writes_inputs(self) -> bool:
        """Whether it declares that it writes to inputs: ``mark_dirty``, an op's schema."""
        formula, schema = self.detail(Formula), self.detail(Schema)
        return bool((formula is not None and formula.uses_mark_dirty)
                    or (schema is not None and schema.mutates))

    @property
    def positional(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "positional")

    def has(self, capability: Capability) -> bool:
        return capability in self.capabilities


class Kind(Protocol):
    """One kind of target (a module of ``gradverify.targets``, listed in ``KINDS``). It owns
    its words: its name and description in messages, the grammar of names it accepts on its
    own (an op's ``ns::op``), and what ``gradverify list`` says of one."""

    name: str
    plural: str
    """How messages name its targets when they list what gradverify verifies: ``custom ops
    (torch.library.custom_op, or 'namespace::op')``."""
    listed: bool
    """Whether a module's (or package's) targets include this kind's objects (plain functions
    are only targets when named: every helper is a function)."""
    capabilities: frozenset[Capability]
    """What its targets may have (a target's own ``capabilities`` are a subset)."""
    lacking: Mapping[Capability, str]
    """Why a target of this kind lacks a capability, in its own words (for skipped rows)."""

    def detect(self, obj: Any) -> bool:
        """Whether ``obj`` is a target of this kind."""

    def introspect(self, obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        """Its ``Target``, or TargetError saying why gradverify cannot verify it."""

    def defined_in(self, obj: Any, module: str) -> bool:
        """Whether module ``module`` defines ``obj`` (a module's targets are its own)."""

    def name_of(self, text: str) -> str | None:
        """``text`` as this kind's own grammar spells a target (``torch.ops.ns.op`` as
        ``ns::op``), or None when it is not a name of this kind (most kinds have none: their
        targets are named ``module:attribute``)."""

    def by_name(self, text: str, imports: tuple[str, ...]) -> Target:
        """The target named ``text`` in this kind's grammar, after importing ``imports``."""

    def listing(self, obj: Any, name: str) -> tuple[str, list[str]]:
        """What ``gradverify list`` says of ``obj``: its target name and its traits."""

    short: str
    """How messages that say who has a capability name its targets: ``custom ops`` (empty:
    they are named among another kind's)."""
    qualified: Mapping[Capability, str]
    """For a capability only some of its targets have, which: ``with register_autograd``."""

    def named(self, obj: Any) -> str | None:
        """``obj``'s name in this kind's own grammar (``ns::op``), or None (it has none)."""

    def same_name(self, a: str, b: str) -> bool:
        """Whether two names in this kind's grammar name one target (``ns::op`` and
        ``ns::op.default``)."""

    def backward_holder(self, target: Target, node: Any) -> Holder | None:
        """Where ``target``'s own backward lives, so that ``--mutate`` can swap it, or None
        (it has none of its own, or one that cannot be swapped). ``node``: a graph node of a
        call of it (an op registered by name is found through it)."""

    def bare_call(self, target: Target, attribute: str | None) -> str | None:
        """The source that binds ``call``, by which a bare-torch script (``--repro``) calls
        ``target`` with a case's inputs, having imported ``torch`` and ``attribute`` (None for
        a target named in the kind's grammar): ``call = Name.apply``, or the statements that
        build a module; None where no plain call reaches it."""

    def no_raw_backward(self, target: Target, node: Any) -> str | None:
        """Why backward cannot be called raw on the graph of a call of ``target`` (``node``,
        its output's), though it has its own autograd; None when it can (or has none)."""


class UnnamedKind:
    """What a kind whose targets are only named ``module:attribute`` shares: no grammar of
    its own; and what a kind without a backward of its own shares."""

    qualified: Mapping[Capability, str] = MappingProxyType({})

    @staticmethod
    def name_of(text: str) -> str | None:
        return None

    @staticmethod
    def named(obj: Any) -> str | None:
        return None

    @staticmethod
    def same_name(a: str, b: str) -> bool:
        return a == b

    @staticmethod
    def backward_holder(target: Target, node: Any) -> Holder | None:
        return None

    @staticmethod
    def bare_call(target: Target, attribute: str | None) -> str | None:
        return None if attribute is None else f"call = {attribute}\n"

    @staticmethod
    def no_raw_backward(target: Target, node: Any) -> str | None:
        return None

    @staticmethod
    def by_name(text: str, imports: tuple[str, ...]) -> Target:
        raise AssertionError(f"{text!r} is not a name of this kind")
