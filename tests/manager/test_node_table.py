"""The extender's node table (specon_manager.node_table.NodeTable): rows stay right while
nodes come and go and the table compacts its index, and the encoded answer is the extender's
JSON."""

from __future__ import annotations

import json

import numpy as np

from specon_manager.node_table import MAX_PRIORITY, NodeTable, host_priority


def test_rows_stay_right_through_growth_compaction_and_removal() -> None:
    t = NodeTable(capacity=4)
    live: dict[str, float] = {}
    for i in range(700):
        name = f"node-{i}"
        t.put(name, 1.0, float(i), 0.1, 2.0, 0)
        live[name] = float(i)
        if i % 7 == 3:  # churn: a node goes, its row is reused by a later one
            gone = f"node-{i - 3}"
            t.drop(gone)
            live.pop(gone)
    asked = [*live, "never-seen", "node-0"]  # node-0 was dropped
    rows = t.rows(asked)
    assert rows[-1] == 0 and rows[-2] == 0
    assert len(set(rows[:-2].tolist())) == len(live)
    assert np.array_equal(t.score[rows[:-2]], np.array(list(live.values())))


def test_the_encoded_answer_is_the_host_priority_list() -> None:
    t = NodeTable()
    for name in ("a", "b.example", 'odd"name'):
        t.put(name, 1.0, 0.0, 0.0, 0.0, 0)
    names = ["b.example", "a", "missing", 'odd"name']
    scores = np.array([MAX_PRIORITY, 0, 0, 7])
    got = json.loads(t.encode(names, t.rows(names), scores))
    assert got == [{"Host": n, "Score": int(s)} for n, s in zip(names, scores, strict=True)]
    assert host_priority("x", 3) == b'{"Host":"x","Score":3}'
    assert t.encode([], t.rows([]), np.array([], dtype=np.int64)) == b"[]"
