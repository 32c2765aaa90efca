"""What the ep benchmarks (ep_waits.py, ep_memory.py) share: the environment their runs take, a layout's ranks and
--set lines ("dp2", "ep4": dp ranks, with ep over all of them for "ep"), the mpiexec launcher (oversubscribed past
this machine's cores), and one step's routed rows per block and destination rank from metrics.jsonl
(`moe_ep_rows_b<block>_s<src>_d<dst>`, summed over the sources)."""

import os
import re

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_WAIT_POLICY="passive")


def layout_sets(layout):
    ranks = int(layout[2:])
    sets = ["parallel.data_parallel_size=%d" % ranks]
    if layout.startswith("ep"):
        sets.append("parallel.expert_model_parallel_size=%d" % ranks)
    return ranks, sets


def launcher(ranks):
    over = ["--oversubscribe"] if ranks > os.cpu_count() else []
    return ["mpiexec", "-n", str(ranks)] + over + ["--mca", "btl", "self,vader"]


def rows_per_destination(record):
    """{block: {destination rank: rows}} of one metrics record; empty without ep rows."""
    rows = {}
    for key, v in record.items():
        m = re.match(r"moe_ep_rows_b(\d+)_s(\d+)_d(\d+)$", key)
        if m:
            b, d = int(m.group(1)), int(m.group(3))
            rows.setdefault(b, {}).setdefault(d, 0.0)
            rows[b][d] += v
    return rows
