"""Model importers: ``compiler.frontends.onnx.import_model`` (needs the optional
``onnx`` extra: ``pip install -e '.[onnx]'``)."""
