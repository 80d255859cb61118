"""edgebyoc target ``adreno``: OpenCL ``image2d_t`` kernels for mobile GPUs, each layer's access
patterns, thread tile, work group and warp shape chosen by TMModel (Guan et al., ICS '25).

Naming contract: one execution module, ``texture``; patterns ``adreno.texture.<kernel>`` for
``conv2d`` (with ``_bias``, ``_bias_relu``, ``_bias_clip``), ``dwconv2d``, ``deconv2d``,
``matmul``, ``softmax`` and ``layernorm``; one kernel per region, its blob run by the
``adreno.opencl`` runtime loader through pyopencl.
"""
