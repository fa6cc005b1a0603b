"""Task protocols: one module per paper task owns its prompt, answer forms and decoding.

``data_prep``, ``rewards`` and the evaluation import these constants and functions, so nothing that
defines what the model sees or how its output is read is written twice.
"""
