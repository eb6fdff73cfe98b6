"""Blanking nvcc's per-build names: the forms read from real nvcc 13.0 output."""

from __future__ import annotations

import pytest

from wheelkiln.wheels.nvcc_names import blank_names, blank_symbol, stub_listing


@pytest.mark.parametrize(
    ("first", "second", "blanked"),
    [
        (  # exported from an -rdc module: the path hash differs per build tree
            "__cudaRegisterLinkedBinary_4ff78616_4_k_cu_ed63f977",
            "__cudaRegisterLinkedBinary_c963f4b8_4_k_cu_ed63f977",
            "__cudaRegisterLinkedBinary_00000000_4_k_cu_00000000",
        ),
        (
            "__fatbinwrap_32e8f3ae_13_other_name_cu_ed63f977",
            "__fatbinwrap_023f271d_13_other_name_cu_ed63f977",
            "__fatbinwrap_00000000_13_other_name_cu_00000000",
        ),
        (  # the form with nvcc's pid after the id
            "_INTERNAL_4ff78616_4_k_cu_ed63f977_1234",
            "_INTERNAL_c963f4b8_4_k_cu_9a0b1c2d_5678",
            "_INTERNAL_00000000_4_k_cu_00000000_0000",
        ),
        (  # whole-program mode: the id ends in the first device symbol's name
            "_ZN33_GLOBAL__N__da5af966_4_s_cu_table9anon_kernEPi",
            "_ZN33_GLOBAL__N__0b1c2d3e_4_s_cu_table9anon_kernEPi",
            "_ZN33_GLOBAL__N__00000000_4_s_cu_table9anon_kernEPi",
        ),
        (
            "__nv_static_25__4ff78616_4_k_cu_ed63f977__Z5skernPi",
            "__nv_static_25__c963f4b8_4_k_cu_ed63f977__Z5skernPi",
            "__nv_static_25__00000000_4_k_cu_00000000__Z5skernPi",
        ),
    ],
)
def test_module_ids_blank_to_the_same_name(first: str, second: str, blanked: str) -> None:
    assert blank_symbol(first) == blank_symbol(second) == blanked


def test_blanking_keeps_length_and_everything_else() -> None:
    data = (
        b"\x7fELF\x00_GLOBAL__N__da5af966_4_s_cu_table\x00tmpxft_00001ea4_00000000-6_k\x00VALUE=3"
    )
    other = (
        b"\x7fELF\x00_GLOBAL__N__11223344_4_s_cu_table\x00tmpxft_00002bb0_00000000-6_k\x00VALUE=3"
    )
    assert len(blank_names(data)) == len(data)
    assert blank_names(data) == blank_names(other)
    assert blank_names(data) != blank_names(other.replace(b"VALUE=3", b"VALUE=4"))


def test_a_length_field_that_does_not_fit_is_no_module_id() -> None:
    """`<8 hex>_<n>_` is an id only when n characters of a name and `_` follow."""
    assert blank_symbol("sha_12345678_9_abc_def") == "sha_12345678_9_abc_def"
    assert blank_symbol("x_deadbeef_3_abcd_") == "x_deadbeef_3_abcd_"


# objdump -d of .plt in two links of one library whose imports the linker ordered
# differently (their names hold nvcc's per-build module ids): the first stub's label
# names whichever import came first. Seen in CI on two builds in different directories.
PLT_A = [
    "0000000000008020 <ftell@plt-0x10>:",
    "    8020:\tpush   0x1fe2(%rip)        # a008 <_GLOBAL_OFFSET_TABLE_+0x8>",
    "0000000000008030 <ftell@plt>:",
    "    8030:\tjmp    *0x1fe2(%rip)        # a018 <ftell@GLIBC_2.2.5>",
    "0000000000008040 <__cudaRegisterLinkedBinary_00000000_4_k_cu_00000000@plt>:",
    "    8040:\tjmp    *0x1fda(%rip)        # a020 <__cudaRegisterLinkedBinary>",
]
PLT_B = [
    "0000000000008020 <__cudaRegisterLinkedBinary_00000000_4_k_cu_00000000@plt-0x10>:",
    "    8020:\tpush   0x1fe2(%rip)        # a008 <_GLOBAL_OFFSET_TABLE_+0x8>",
    "0000000000008030 <__cudaRegisterLinkedBinary_00000000_4_k_cu_00000000@plt>:",
    "    8030:\tjmp    *0x1fe2(%rip)        # a018 <__cudaRegisterLinkedBinary>",
    "0000000000008040 <ftell@plt>:",
    "    8040:\tjmp    *0x1fda(%rip)        # a020 <ftell@GLIBC_2.2.5>",
]


def test_stubs_compare_whatever_import_the_linker_put_first() -> None:
    assert stub_listing(PLT_A) == stub_listing(PLT_B)


def test_a_stub_for_another_import_still_differs() -> None:
    other = [line.replace("ftell", "fseek") for line in PLT_B]
    assert stub_listing(PLT_A) != stub_listing(other)
    called = [line.replace("jmp    *0x1fda", "call   *0x1fda") for line in PLT_B]
    assert stub_listing(PLT_A) != stub_listing(called)
