"""Model importers: ``compiler.frontends.onnx.import_model`` (needs the optional
``onnx`` extra: ``pip install -e '.[onnx]'``) and
``compiler.frontends.torch.import_program`` / ``compile_module`` / the
``torch.compile`` backend (needs the ``torch`` extra)."""
