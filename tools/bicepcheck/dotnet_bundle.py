"""Read Azure's Bicep type definitions out of the ``azmcp`` binary (npm ``@azure/mcp``), offline.

``azmcp`` is a .NET single-file bundle. One of the files inside it,
``Microsoft.Azure.Mcp.AzTypes.Internal.Compact.dll``, carries the Bicep type index
(``index.json``) and one ``types.json`` per provider and API version as deflated manifest
resources: the same data ``azmcp bicepschema get`` prints, but for every API version it ships
instead of only the latest, and without starting a process per resource type (about 5 s each).

Formats read here: the .NET single-file bundle manifest (dotnet/runtime, ``src/installer/managed/
Microsoft.NET.HostModel/Bundle``: header v2+, entries of offset, size, compressed size, type, path)
and ECMA-335 metadata (PE CLI header, ``#~`` table stream, the ManifestResource table 0x28).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

# SHA-256 of ".net core bundle": the host stores the bundle header offset in the 8 bytes before it.
BUNDLE_SIGNATURE = bytes.fromhex("8b1202b96a612038727b930214d7a03213f5b9e6efae3318ee3b2dce24b36aae")
TYPES_ASSEMBLY = "Microsoft.Azure.Mcp.AzTypes.Internal.Compact.dll"
# Tables a HasCustomAttribute coded index can point to (ECMA-335 II.24.2.6), in tag order.
HAS_CUSTOM_ATTRIBUTE: tuple[int, ...] = (0x06, 0x04, 0x01, 0x02, 0x08, 0x09, 0x0A, 0x00, 0x0E, 0x17, 0x14)
HAS_CUSTOM_ATTRIBUTE += (0x11, 0x1A, 0x1B, 0x20, 0x23, 0x26, 0x27, 0x28, 0x2A, 0x2C, 0x2B)


class BundleError(ValueError):
    """The file is not the bundle this module knows how to read."""


def _read_string(data: bytes | mmap.mmap, at: int) -> tuple[str, int]:
    """A .NET BinaryWriter string: 7-bit encoded length, then UTF-8 bytes."""
    length = shift = 0
    while True:
        byte = data[at]
        at += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    return bytes(data[at : at + length]).decode(), at + length


def bundled_file(binary: Path, name: str) -> bytes:
    """The bytes of one file of a .NET single-file bundle."""
    with binary.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        marker = data.find(BUNDLE_SIGNATURE)
        if marker < 8:
            raise BundleError(f"{binary} is not a .NET single-file bundle")
        (header,) = struct.unpack_from("<q", data, marker - 8)
        major, _minor, count = struct.unpack_from("<iii", data, header)
        at = header + 12
        _bundle_id, at = _read_string(data, at)
        if major >= 2:
            at += 4 * 8 + 8  # deps.json and runtimeconfig.json locations, flags
        for _ in range(count):
            offset, size = struct.unpack_from("<qq", data, at)
            at += 16
            compressed = 0
            if major >= 6:  # .NET 6+ records a compressed size (0: stored)
                (compressed,) = struct.unpack_from("<q", data, at)
                at += 8
            at += 1  # file type
            path, at = _read_string(data, at)
            if path == name:
                if compressed:
                    return zlib.decompress(bytes(data[offset : offset + compressed]))
                return bytes(data[offset : offset + size])
    raise BundleError(f"{binary} does not contain {name}")


def _rva_to_offset(sections: list[tuple[int, int, int, int]], rva: int) -> int:
    for virtual_address, virtual_size, raw_pointer, raw_size in sections:
        if virtual_address <= rva < virtual_address + max(virtual_size, raw_size):
            return rva - virtual_address + raw_pointer
    raise BundleError(f"RVA {rva:#x} is in no section")


def manifest_resources(dll: bytes) -> dict[str, tuple[int, int]]:
    """Name -> (offset, length) in ``dll`` of every embedded manifest resource."""
    pe = struct.unpack_from("<I", dll, 0x3C)[0]
    if dll[pe : pe + 4] != b"PE\0\0":
        raise BundleError("not a PE file")
    section_count = struct.unpack_from("<H", dll, pe + 6)[0]
    optional_size = struct.unpack_from("<H", dll, pe + 20)[0]
    optional = pe + 24
    magic = struct.unpack_from("<H", dll, optional)[0]
    directories = optional + (96 if magic == 0x10B else 112)
    sections = []
    at = optional + optional_size
    for _ in range(section_count):
        virtual_size, virtual_address, raw_size, raw_pointer = struct.unpack_from("<IIII", dll, at + 8)
        sections.append((virtual_address, virtual_size, raw_pointer, raw_size))
        at += 40
    cli_rva = struct.unpack_from("<I", dll, directories + 14 * 8)[0]
    cli = _rva_to_offset(sections, cli_rva)
    metadata_rva, _, _, _, resources_rva, _ = struct.unpack_from("<IIIIII", dll, cli + 8)
    metadata = _rva_to_offset(sections, metadata_rva)
    resources = _rva_to_offset(sections, resources_rva)
    version_length = struct.unpack_from("<I", dll, metadata + 12)[0]
    at = metadata + 16 + version_length
    stream_count = struct.unpack_from("<H", dll, at + 2)[0]
    at += 4
    streams: dict[str, int] = {}
    for _ in range(stream_count):
        offset = struct.unpack_from("<I", dll, at)[0]
        end = dll.index(b"\0", at + 8)
        streams[dll[at + 8 : end].decode()] = metadata + offset
        at = (end + 4) & ~3
    tables = streams.get("#~", streams.get("#-"))
    if tables is None or "#Strings" not in streams:
        raise BundleError("no metadata tables")
    return _resource_table(dll, tables, streams["#Strings"], resources)


def _resource_table(dll: bytes, tables: int, strings: int, resources: int) -> dict[str, tuple[int, int]]:
    heap_sizes = dll[tables + 6]
    valid = struct.unpack_from("<Q", dll, tables + 8)[0]
    at = tables + 24
    rows = [0] * 64
    for table in range(64):
        if valid >> table & 1:
            rows[table] = struct.unpack_from("<I", dll, at)[0]
            at += 4
    row_size = _row_sizes(rows, heap_sizes)
    for table in range(0x28):
        at += rows[table] * row_size[table]
    string_index = 4 if heap_sizes & 1 else 2
    implementation = _coded(rows, [0x26, 0x23, 0x27])
    found: dict[str, tuple[int, int]] = {}
    for _ in range(rows[0x28]):  # ManifestResource: Offset, Flags, Name, Implementation
        offset = struct.unpack_from("<I", dll, at)[0]
        name_at = struct.unpack_from("<I" if string_index == 4 else "<H", dll, at + 8)[0]
        at += 8 + string_index + implementation
        end = dll.index(b"\0", strings + name_at)
        length = struct.unpack_from("<I", dll, resources + offset)[0]
        found[dll[strings + name_at : end].decode()] = (resources + offset + 4, length)
    return found


def _coded(rows: list[int], tables: list[int] | tuple[int, ...]) -> int:
    """Size of a coded index over ``tables`` (ECMA-335 II.24.2.6)."""
    tag_bits = (len(tables) - 1).bit_length()
    return 2 if max(rows[t] for t in tables) < (1 << (16 - tag_bits)) else 4


def _row_sizes(rows: list[int], heap_sizes: int) -> dict[int, int]:
    """Row size of tables 0x00-0x27 (ECMA-335 II.22), to skip to ManifestResource (0x28)."""
    s = 4 if heap_sizes & 1 else 2
    g = 4 if heap_sizes & 2 else 2
    b = 4 if heap_sizes & 4 else 2
    index: Callable[[int], int] = lambda table: 2 if rows[table] < 0x10000 else 4  # noqa: E731
    type_def_or_ref = _coded(rows, [0x02, 0x01, 0x1B])
    has_constant = _coded(rows, [0x04, 0x08, 0x17])
    has_custom_attribute = _coded(rows, HAS_CUSTOM_ATTRIBUTE)
    has_field_marshal = _coded(rows, [0x04, 0x08])
    has_decl_security = _coded(rows, [0x02, 0x06, 0x20])
    member_ref_parent = _coded(rows, [0x02, 0x01, 0x1A, 0x06, 0x1B])
    has_semantics = _coded(rows, [0x14, 0x17])
    method_def_or_ref = _coded(rows, [0x06, 0x0A])
    member_forwarded = _coded(rows, [0x04, 0x06])
    implementation = _coded(rows, [0x26, 0x23, 0x27])
    custom_attribute_type = _coded(rows, [0x06, 0x06, 0x06, 0x0A, 0x06])
    resolution_scope = _coded(rows, [0x00, 0x1A, 0x23, 0x01])
    return {
        0x00: 2 + s + 3 * g,  # Module
        0x01: resolution_scope + 2 * s,  # TypeRef
        0x02: 4 + 2 * s + type_def_or_ref + index(0x04) + index(0x06),  # TypeDef
        0x03: index(0x04),  # FieldPtr
        0x04: 2 + s + b,  # Field
        0x05: index(0x06),  # MethodPtr
        0x06: 8 + s + b + index(0x08),  # MethodDef
        0x07: index(0x08),  # ParamPtr
        0x08: 4 + s,  # Param
        0x09: index(0x02) + type_def_or_ref,  # InterfaceImpl
        0x0A: member_ref_parent + s + b,  # MemberRef
        0x0B: 2 + has_constant + b,  # Constant
        0x0C: has_custom_attribute + custom_attribute_type + b,  # CustomAttribute
        0x0D: has_field_marshal + b,  # FieldMarshal
        0x0E: 2 + has_decl_security + b,  # DeclSecurity
        0x0F: 6 + index(0x02),  # ClassLayout
        0x10: 4 + index(0x04),  # FieldLayout
        0x11: b,  # StandAloneSig
        0x12: index(0x02) + index(0x14),  # EventMap
        0x13: index(0x14),  # EventPtr
        0x14: 2 + s + type_def_or_ref,  # Event
        0x15: index(0x02) + index(0x17),  # PropertyMap
        0x16: index(0x17),  # PropertyPtr
        0x17: 2 + s + b,  # Property
        0x18: 2 + index(0x06) + has_semantics,  # MethodSemantics
        0x19: index(0x02) + 2 * method_def_or_ref,  # MethodImpl
        0x1A: s,  # ModuleRef
        0x1B: b,  # TypeSpec
        0x1C: 2 + member_forwarded + s + index(0x1A),  # ImplMap
        0x1D: 4 + index(0x04),  # FieldRVA
        0x1E: 8,  # EncLog
        0x1F: 4,  # EncMap
        0x20: 16 + b + 2 * s,  # Assembly
        0x21: 4,  # AssemblyProcessor
        0x22: 12,  # AssemblyOS
        0x23: 12 + 2 * b + 2 * s,  # AssemblyRef
        0x24: 4 + index(0x23),  # AssemblyRefProcessor
        0x25: 12 + index(0x23),  # AssemblyRefOS
        0x26: 4 + s + b,  # File
        0x27: 8 + 2 * s + implementation,  # ExportedType
    }


def inflate(dll: bytes, location: tuple[int, int]) -> bytes:
    """A ``*.deflated`` resource (raw deflate, as .NET's DeflateStream writes it)."""
    offset, length = location
    return zlib.decompress(dll[offset : offset + length], -15)
