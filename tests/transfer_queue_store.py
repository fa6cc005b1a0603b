"""TransferQueue (a service verl talks to over Ray) as a dict, so verl's replay buffer runs in the test process."""

from __future__ import annotations

import transfer_queue as tq


class TransferQueueStore:
    """Tags per partition (prompt entries and trajectories), fields per key, and every key cleared."""

    def __init__(self):
        self.tags: dict[str, dict[str, dict]] = {"train": {}}
        self.fields: dict[str, dict] = {}
        self.cleared: list[str] = []

    def kv_list(self, partition_id=None):
        return {p: dict(t) for p, t in self.tags.items() if partition_id in (None, p)}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {field: [self.fields[k][field] for k in keys] for field in select_fields}

    def kv_clear(self, partition_id, keys):
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.fields.pop(key, None)
        self.cleared.extend(keys)

    def install(self, monkeypatch):
        """This store in place of the three calls verl's buffer and the project make."""
        for name in ("kv_list", "kv_batch_get", "kv_clear"):
            monkeypatch.setattr(tq, name, getattr(self, name))
        return self
