"""Loading compiled x86 object code into the process: llvmlite only, no MLIR.

This module imports nothing from the compiler (only ``runtime.errors``), so a
process that runs exported artifacts can use it without MLIR installed; it is
meant to move under ``runtime/`` unchanged.

``load_object(data) -> CompiledObject`` links one relocatable ELF object into a
fresh MCJIT engine. Before linking, every undefined symbol of the object is
resolved against the process (libc, libm, what ``llvm.add_symbol`` or
``load_library_permanently`` made visible): MCJIT links unresolved symbols to
address 0 and the first call then segfaults (toolchain.md §5), so an
unresolvable symbol is a typed ``ObjectLoadError`` instead.
"""
from __future__ import annotations

import ctypes
import struct
import threading
from typing import Iterable

import llvmlite.binding as llvm

from runtime.cpu_features import check_cpu_features
from runtime.errors import FuelError


class ObjectLoadError(FuelError, RuntimeError):
    """An object file could not be loaded: not an object for this host, or it
    needs a symbol this process does not provide."""


class SymbolNotFoundError(FuelError, KeyError):
    """A symbol asked of a ``CompiledObject`` that it does not define."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


_init_lock = threading.Lock()
_initialized = False


def ensure_llvm_initialized() -> None:
    """Initialise llvmlite's native target, asm printer and parser once."""
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()
            _initialized = True


def host_target_machine(*, jit: bool, opt: int = 3) -> "llvm.TargetMachine":
    """A NEW target machine for the host CPU and features (what MCJIT links
    loaded objects with).

    Never share the result between two engines: MCJIT takes ownership of its
    target machine, and a shared one is freed twice (SIGSEGV at exit)."""
    ensure_llvm_initialized()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, opt=opt,
                                        reloc="pic", codemodel="default", jit=jit)


# -- ELF symbol table ---------------------------------------------------------
_SHT_SYMTAB = 2
_STB_GLOBAL, _STB_WEAK = 1, 2
_STT_FUNC = 2


def elf_symbols(data: bytes) -> tuple[list[str], list[str]]:
    """(defined global functions, undefined symbols) of a 64-bit little-endian
    ELF relocatable object. Raises ObjectLoadError for anything else."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ObjectLoadError("not an ELF object file (bad magic); fuelc objects are "
                              "x86-64 ELF relocatables produced by emit_object()")
    if data[4] != 2 or data[5] != 1:
        raise ObjectLoadError("ELF object is not 64-bit little-endian; it was not built "
                              "for an x86-64 host")
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                    for i in range(shnum)]
        defined, undefined = [], []
        for sec in sections:
            if sec[1] != _SHT_SYMTAB:
                continue
            off, size, link, entsize = sec[4], sec[5], sec[6], sec[9] or 24
            str_off = sections[link][4]
            for k in range(1, size // entsize):  # entry 0 is the null symbol
                name_off, info, _other, shndx, _value, _size = struct.unpack_from(
                    "<IBBHQQ", data, off + k * entsize)
                if not name_off:
                    continue
                end = data.index(b"\0", str_off + name_off)
                name = data[str_off + name_off:end].decode()
                bind, typ = info >> 4, info & 0xF
                if shndx == 0:
                    undefined.append(name)
                elif bind in (_STB_GLOBAL, _STB_WEAK) and typ == _STT_FUNC:
                    defined.append(name)
        return defined, undefined
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise ObjectLoadError(f"corrupt ELF object ({len(data)} bytes): {e}") from None


# -- runtime symbols the process must provide --------------------------------
_process = ctypes.CDLL(None)  # dlopen(NULL): the global scope MCJIT also searches


def _resolvable(name: str) -> bool:
    if llvm.address_of_symbol(name):  # llvm.add_symbol / load_library_permanently
        return True
    try:
        getattr(_process, name)
        return True
    except AttributeError:
        return False


def unresolved_symbols(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that the process cannot resolve."""
    ensure_llvm_initialized()
    return [n for n in names if not _resolvable(n)]


class CompiledObject:
    """Machine code linked into this process: one MCJIT engine (with its own
    target machine) holding one object file. Keep it alive as long as any
    address taken from it is called."""

    def __init__(self, data: bytes, engine, defined: list[str]):
        self._data = bytes(data)
        self._engine = engine
        self._symbols = tuple(defined)
        self._addresses: dict[str, int] = {}

    @property
    def object_bytes(self) -> bytes:
        """The relocatable object this was loaded from (for export)."""
        return self._data

    @property
    def symbols(self) -> tuple[str, ...]:
        """The global functions the object defines."""
        return self._symbols

    def address(self, name: str) -> int:
        """The address of global function ``name``; SymbolNotFoundError if the
        object does not define it."""
        addr = self._addresses.get(name)
        if addr is None:
            if name not in self._symbols:
                raise SymbolNotFoundError(
                    f"symbol {name!r} is not defined by this object; it defines "
                    f"{', '.join(self._symbols) or 'nothing'}")
            addr = self._engine.get_function_address(name)
            if not addr:
                raise SymbolNotFoundError(f"symbol {name!r} did not resolve after linking")
            self._addresses[name] = addr
        return addr

    def ciface(self, name: str, nargs: int) -> "KernelFunction":
        """The C-interface wrapper ``_mlir_ciface_<name>`` of an MLIR function
        as a callable taking ``nargs`` descriptor addresses (ints)."""
        return KernelFunction(self, f"_mlir_ciface_{name}", nargs)

    def __repr__(self) -> str:
        return f"<CompiledObject {len(self._data)} bytes: {', '.join(self._symbols)}>"


_addressof, _Structure = ctypes.addressof, ctypes.Structure


class KernelFunction:
    """A void(ptr, ..., ptr) function in a CompiledObject; keeps it alive."""

    __slots__ = ("owner", "name", "nargs", "_fn")

    def __init__(self, owner: CompiledObject, name: str, nargs: int):
        self.owner = owner
        self.name = name
        self.nargs = nargs
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))
        self._fn = proto(owner.address(name))

    def __call__(self, *descriptors) -> None:
        """Call with descriptors (ctypes structures, kept alive for the call)
        or raw addresses (ints)."""
        if len(descriptors) != self.nargs:
            raise TypeError(f"{self.name} takes {self.nargs} memref descriptors, "
                            f"got {len(descriptors)}")
        self._fn(*[_addressof(d) if isinstance(d, _Structure) else d for d in descriptors])


def load_object(data: bytes, required_features: Iterable[str] = (), target: str = "") -> CompiledObject:
    """Link a relocatable object (from ``emit_object``) into this process.

    ``required_features`` are the CPU features the object was compiled for
    (its target's); a CPU without them gets ``CpuFeatureError`` naming the
    missing ones, before anything is mapped. Raises ObjectLoadError if it is
    not a 64-bit ELF object or needs a symbol the process does not provide
    (instead of segfaulting on the first call)."""
    check_cpu_features(required_features, target=target, what="a kernel object")
    defined, undefined = elf_symbols(data)
    missing = unresolved_symbols(undefined)
    if missing:
        raise ObjectLoadError(
            f"object needs symbols this process does not provide: {', '.join(missing)}; "
            "load the library that defines them (llvmlite.binding.load_library_permanently) "
            "or recompile")
    tm = host_target_machine(jit=True)
    try:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(data)))
        engine.finalize_object()
    except RuntimeError as e:
        raise ObjectLoadError(f"MCJIT could not link the object: {e}") from None
    return CompiledObject(data, engine, defined)
