"""Mako templates of the sparse_cpu plugin."""
