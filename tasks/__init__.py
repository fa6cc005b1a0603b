"""Task protocols: one module per paper task owns its prompt, answer forms and decoding.

``data_prep``, ``rewards`` and the evaluation import these constants and functions, so nothing that
defines what the model sees or how its output is read is written twice. ``tasks.registry`` holds one
``TaskSpec`` per task (data sources, reward, datasets, asset builders, evaluation benches), each registered by
its protocol module; tasks are the bottom layer and name higher layers' parts by import path.
"""
