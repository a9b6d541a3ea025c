"""The model repository: config.pbtxt through its protobuf schema, and the repositories
generated from the committed one (GPU variant, scenario presets, padding policies, queue
policies), plus the check for missing exported artifacts.
"""
