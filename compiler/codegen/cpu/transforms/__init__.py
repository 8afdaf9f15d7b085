"""Transform-dialect scripts used by the CPU strategies (one module per
kernel family). Each exports a function that returns the script text: a
module holding ``transform.named_sequence @__transform_main``."""
