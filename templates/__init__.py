"""The core's Mako templates, shipped inside the wheel as the package ``edgebyoc.templates``.

Read them with ``importlib.resources.files("edgebyoc.templates")``; see ``edgebyoc.codegen.render``.
"""
