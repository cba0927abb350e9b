"""Kernel descriptions: the op registry (numerics, shapes, work) and fused-kernel implementations."""
