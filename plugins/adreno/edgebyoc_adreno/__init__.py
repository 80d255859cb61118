"""edgebyoc target ``adreno``: OpenCL ``image2d_t`` kernels for mobile GPUs, each layer's access
patterns, thread tile, work group and warp shape chosen by TMModel (Guan et al., ICS '25).

Naming contract: one execution module, ``texture``; patterns ``adreno.texture.<anchor>`` and
``<anchor>_bias``, ``_relu``, ``_clip``, ``_bias_relu``, ``_bias_clip`` for the anchors
``conv2d`` (groups 1 or depthwise), ``deconv2d`` and ``matmul``, and ``softmax`` and
``layernorm``; one kernel per region, its blob run by the ``adreno.opencl`` runtime loader
through pyopencl.
"""
