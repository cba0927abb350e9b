"""The op table split by layer: one OpDef per op (ge.ops: semantics) and one Kernel per op
(codegen.registry: .om type, launch, work) that holds that same OpDef -- never a copy."""
from codegen.registry import all_kernels, kernel_by_om_type, kernel_of
from ge.ops.registry import all_ops


def test_every_onnx_op_has_one_kernel_built_on_its_own_opdef():
    for op_type, op in all_ops().items():
        kernel = kernel_of(op_type)
        assert kernel is not None, f"{op_type} has semantics in ge.ops but no kernel in codegen.onnx_ops"
        assert kernel.op is op, f"{op_type}: the kernel holds a different OpDef than ge.ops"


# Ops GE inserts itself (not in an ONNX model, not made by fusion): their kernel module.
INSERTED_OPS = {"Aipp": "codegen.aipp", "MapIndex": "codegen.map_index"}


def test_kernels_beyond_the_onnx_ops_are_fused_kernels_or_ops_ge_inserts():
    extra = {t for t in all_kernels() if t not in all_ops()}
    assert extra, "the fused kernels are registered"
    for op_type in extra:
        module = kernel_of(op_type).op.compute.__module__
        assert module.startswith("codegen.fused.") or INSERTED_OPS.get(op_type) == module, (op_type, module)


def test_om_types_name_one_kernel_each():
    for op_type, kernel in all_kernels().items():
        assert kernel_by_om_type(kernel.om_type) is kernel, op_type
