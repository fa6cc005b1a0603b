"""Task protocols: one module per paper task owns its prompt, answer forms and decoding, and registers its
``TaskSpec`` in ``tasks.registry``; ``data_prep``, ``rewards`` and the evaluation import them.
"""
