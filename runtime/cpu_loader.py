"""Loading compiled x86 object code into the process: llvmlite only, no MLIR.

This module imports nothing from the compiler (only ``runtime``), so a
process that runs exported artifacts (``runtime.artifact``) uses it without
MLIR installed. ``compiler.codegen.loader`` re-exports it.

``load_object(data) -> CompiledObject`` links one relocatable ELF object into a
fresh MCJIT engine. Before linking, every undefined symbol of the object is
resolved against the process (libc, libm, what ``llvm.add_symbol`` or
``load_library_permanently`` made visible): MCJIT links unresolved symbols to
address 0 and the first call then segfaults, so an
unresolvable symbol is a typed ``ObjectLoadError`` instead.
"""
from __future__ import annotations

import ctypes
import struct
import threading
from typing import Iterable

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
    import llvmlite.binding as llvm  # imported on first use (docs/compile-at-scale.md)
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
    import llvmlite.binding as llvm
    ensure_llvm_initialized()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, opt=opt,
                                        reloc="pic", codemodel="default", jit=jit)


# -- ELF symbol table ---------------------------------------------------------
# The object is checked structurally before MCJIT sees it: every table, name and
# relocation must lie inside the file and refer to things that exist, because
# RuntimeDyld trusts those fields (out-of-range ones abort or corrupt memory).
# This catches damaged headers and tables; damaged code bytes are only caught by
# the kernel cache's hash, which is checked before anything gets here.
_ET_REL, _EM_X86_64 = 1, 62
_SHT_NULL, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 0, 2, 3, 4, 8, 9
_SHN_ABS, _SHN_COMMON = 0xFFF1, 0xFFF2
_STB_GLOBAL, _STB_WEAK = 1, 2
_STT_FUNC = 2
_STT_MAX = 5  # NOTYPE OBJECT FUNC SECTION FILE COMMON; no TLS, no IFUNC
# WRITE ALLOC EXECINSTR MERGE STRINGS INFO_LINK LINK_ORDER GROUP; no TLS, no COMPRESSED
_SHF_KNOWN = 0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x40 | 0x80 | 0x200
# Relocations that reach undefined symbols through a stub or the GOT; every other
# non-64-bit one needs its target within 2 GiB, i.e. defined in this object.
_X86_64_VIA_STUB = {4, 9, 26, 41, 42}
_MAX_ADDEND_SLACK = 1 << 12  # how far past its symbol's section a relocation may point
_MAX_ALIGN = 1 << 12
_MAX_NOBITS = 1 << 30
# x86-64 relocation types RuntimeDyldELF implements -> bytes patched.
_X86_64_RELOCS = {0: 0, 1: 8, 2: 4, 4: 4, 9: 4, 10: 4, 11: 4, 12: 2, 13: 2, 14: 1, 15: 1,
                  24: 8, 25: 8, 26: 4, 41: 4, 42: 4}


def _corrupt(data: bytes, what: str) -> ObjectLoadError:
    return ObjectLoadError(f"corrupt ELF object ({len(data)} bytes): {what}; the file is "
                           "damaged or was not produced by emit_object(): recompile it")


def _cstring(data: bytes, table: tuple, off: int, what: str) -> str:
    """The NUL-terminated name at ``off`` inside string table section ``table``."""
    start, size = table[4], table[5]
    if off >= size:
        raise _corrupt(data, f"{what} name offset {off} is outside its string table ({size} bytes)")
    end = data.find(b"\0", start + off, start + size)
    if end < 0:
        raise _corrupt(data, f"{what} name at offset {off} is not NUL-terminated")
    try:
        return data[start + off:end].decode()
    except UnicodeDecodeError:
        raise _corrupt(data, f"{what} name at offset {off} is not valid UTF-8") from None


def elf_symbols(data: bytes) -> tuple[list[str], list[str]]:
    """(defined global functions, undefined symbols) of a 64-bit little-endian
    x86-64 ELF relocatable object, after checking that its section table,
    symbol table, names and relocations are consistent and inside the file.
    Raises ObjectLoadError (and nothing else) for anything else."""
    data = bytes(data)
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ObjectLoadError("not an ELF object file (bad magic); fuelc objects are "
                              "x86-64 ELF relocatables produced by emit_object()")
    if data[4] != 2 or data[5] != 1:
        raise ObjectLoadError("ELF object is not 64-bit little-endian; it was not built "
                              "for an x86-64 host")
    e_type, e_machine = struct.unpack_from("<HH", data, 0x10)
    if e_type != _ET_REL or e_machine != _EM_X86_64:
        raise ObjectLoadError(f"ELF file has type {e_type} and machine {e_machine}; fuelc "
                              f"objects are x86-64 relocatables (type {_ET_REL}, machine "
                              f"{_EM_X86_64}) produced by emit_object()")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize != 64 or not 0 < shnum or shoff + shnum * 64 > len(data):
        raise _corrupt(data, f"section header table ({shnum} x {shentsize} bytes at offset "
                             f"{shoff}) does not fit the file")
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    for i, (_name, typ, flags, _addr, off, size, _link, _info, align, _ent) in enumerate(sections):
        if flags & ~_SHF_KNOWN:
            raise _corrupt(data, f"section {i} has flags {flags:#x} (TLS, compressed or "
                                 "unknown sections are not supported)")
        if align & (align - 1) or align > _MAX_ALIGN:
            raise _corrupt(data, f"section {i} has alignment {align}")
        if typ == _SHT_NOBITS:
            if size > _MAX_NOBITS:
                raise _corrupt(data, f"section {i} reserves {size} bytes")
        elif typ != _SHT_NULL and off + size > len(data):
            raise _corrupt(data, f"section {i} ({size} bytes at offset {off}) extends past "
                                 "the end of the file")
    if shstrndx >= shnum or sections[shstrndx][1] != _SHT_STRTAB:
        raise _corrupt(data, f"section name table index {shstrndx} is not a string table")
    for i, sec in enumerate(sections[1:], 1):
        _cstring(data, sections[shstrndx], sec[0], f"section {i}")
    symtabs = [i for i, sec in enumerate(sections) if sec[1] == _SHT_SYMTAB]
    if len(symtabs) > 1:
        raise _corrupt(data, f"{len(symtabs)} symbol tables")
    defined, undefined, symbols = [], [], []
    for i in symtabs:
        _n, _t, _f, _a, off, size, link, _info, _al, entsize = sections[i]
        if entsize != 24 or size % 24 or link >= shnum or sections[link][1] != _SHT_STRTAB:
            raise _corrupt(data, f"symbol table (section {i}) has entry size {entsize}, size "
                                 f"{size} and string table {link}")
        nsyms = size // 24
        symbols = [struct.unpack_from("<IBBHQQ", data, off + k * 24) for k in range(nsyms)]
        if _info > nsyms:
            raise _corrupt(data, f"symbol table (section {i}) says {_info} of its {nsyms} "
                                 "symbols are local")
        for k in range(1, nsyms):  # entry 0 is the null symbol
            name_off, info, _other, shndx, value, sym_size = symbols[k]
            if info & 0xF > _STT_MAX:
                raise _corrupt(data, f"symbol {k} has type {info & 0xF} (TLS and indirect "
                                     "functions are not supported)")
            if shndx >= shnum and shndx not in (_SHN_ABS, _SHN_COMMON):
                raise _corrupt(data, f"symbol {k} is in section {shndx} of {shnum}")
            if 0 < shndx < shnum and sections[shndx][1] != _SHT_NULL and \
                    value + sym_size > sections[shndx][5]:
                raise _corrupt(data, f"symbol {k} ({sym_size} bytes at {value}) lies outside "
                                     f"section {shndx}")
            if not name_off:
                continue
            name = _cstring(data, sections[link], name_off, f"symbol {k}")
            bind, typ = info >> 4, info & 0xF
            if shndx == 0:
                undefined.append(name)
            elif bind in (_STB_GLOBAL, _STB_WEAK) and typ == _STT_FUNC:
                defined.append(name)
    for i, (_n, typ, _f, _a, off, size, link, info, _al, entsize) in enumerate(sections):
        if typ not in (_SHT_RELA, _SHT_REL):
            continue
        want = 24 if typ == _SHT_RELA else 16
        if entsize != want or size % want or link not in symtabs or not 0 < info < shnum:
            raise _corrupt(data, f"relocation section {i} has entry size {entsize}, size "
                                 f"{size}, symbol table {link} and target section {info}")
        target_size = sections[info][5]
        for k in range(size // want):
            r_offset, r_info = struct.unpack_from("<QQ", data, off + k * want)
            r_sym, r_type = r_info >> 32, r_info & 0xFFFFFFFF
            width = _X86_64_RELOCS.get(r_type)
            if width is None:
                raise _corrupt(data, f"relocation {k} of section {i} has type {r_type}, "
                                     "which the x86-64 JIT linker does not implement")
            if r_sym >= len(symbols) or r_offset + width > target_size:
                raise _corrupt(data, f"relocation {k} of section {i} (symbol {r_sym}, offset "
                                     f"{r_offset}) is outside its symbol table or section")
            _n, _i, _o, shndx, value, _s = symbols[r_sym]
            if r_type and (r_sym == 0 or (width < 8 and r_type not in _X86_64_VIA_STUB
                                          and not 0 < shndx < shnum)):
                raise _corrupt(data, f"relocation {k} of section {i} (type {r_type}) refers "
                                     f"to symbol {r_sym}, which is not defined in the object")
            if typ == _SHT_RELA:
                addend, = struct.unpack_from("<q", data, off + k * want + 16)
                # RuntimeDyld asserts (aborts) on a PC-relative displacement out of range.
                lo, hi = (0, sections[shndx][5]) if 0 < shndx < shnum else (0, 0)
                if not lo - _MAX_ADDEND_SLACK <= value + addend <= hi + _MAX_ADDEND_SLACK:
                    raise _corrupt(data, f"relocation {k} of section {i} points {addend} bytes "
                                         f"from symbol {r_sym}, outside what it refers to")
    return defined, undefined


# -- runtime symbols the process must provide --------------------------------
_process = ctypes.CDLL(None)  # dlopen(NULL): the global scope MCJIT also searches


def _resolvable(name: str) -> bool:
    import llvmlite.binding as llvm
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

    __slots__ = ("owner", "name", "nargs", "_fn", "__weakref__")

    def __init__(self, owner: CompiledObject, name: str, nargs: int):
        self.owner = owner
        self.name = name
        self.nargs = nargs
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))
        self._fn = proto(owner.address(name))

    @property
    def raw(self):
        """The ctypes function itself: ``raw(addr, ...)`` takes the
        descriptors' addresses, with no arity or type check (hot paths that
        built the descriptors themselves)."""
        return self._fn

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
    import llvmlite.binding as llvm
    tm = host_target_machine(jit=True)
    try:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(data)))
        engine.finalize_object()
    except RuntimeError as e:
        raise ObjectLoadError(f"MCJIT could not link the object: {e}") from None
    return CompiledObject(data, engine, defined)


__all__ = ["ObjectLoadError", "SymbolNotFoundError", "CompiledObject", "KernelFunction",
           "ensure_llvm_initialized", "host_target_machine", "elf_symbols",
           "unresolved_symbols", "load_object"]
