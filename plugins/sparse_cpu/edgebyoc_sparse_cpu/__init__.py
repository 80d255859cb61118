"""edgebyoc target ``sparse_cpu``: unstructured-sparse convolutions on x86 (SparDR, Wang et al.).

Naming contract: one execution module, ``spardr``; patterns ``sparse_cpu.spardr.conv2d``,
``...conv2d_bias`` and ``...conv2d_bias_relu``, on NCHW fp32 convolutions with constant weights
sparse enough that the sparse kernel beats the dense host path (``cost.py``).
"""
