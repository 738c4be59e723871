"""vLLM replicas on one CPU node bind their OpenMP threads to cores the others leave."""

from __future__ import annotations

from engine_nodes import h100_node, request

from llmgw_core.engines import build_launch
from llmgw_core.engines.cpu_bind import binding_beside, bound_cores, cpu_ids, cpulist_of
from llmgw_core.facts import NumaNode

TWO_SOCKETS = (
    NumaNode(node=0, cpus=64, memory_mib=262_144, cpulist="0-31,64-95"),
    NumaNode(node=1, cpus=64, memory_mib=262_144, cpulist="32-63,96-127"),
)
TWO_CORES = (NumaNode(node=0, cpus=2, memory_mib=24_105, cpulist="0-1"),)


def test_cpulists_read_and_written_as_the_kernel_writes_them():
    assert cpu_ids("0-3,8") == [0, 1, 2, 3, 8]
    assert cpu_ids("0-x") == [] and cpu_ids("²") == []
    assert cpulist_of([5, 0, 1, 2, 9, 10]) == "0-2,5,9-10"


def test_the_first_replica_on_a_node_binds_as_vllm_chooses():
    assert binding_beside(TWO_SOCKETS, 1, []) == (None, None)


def test_beside_a_replica_bound_by_vllm_the_next_takes_the_core_it_kept_free():
    # vLLM alone on two cores bound its threads to core 0 and kept core 1 for its scheduler.
    assert bound_cores(None, 1, TWO_CORES) == {0}
    assert binding_beside(TWO_CORES, 1, [(None, 1)]) == ("1", None)


def test_beside_explicit_bindings_each_rank_takes_what_is_left_of_its_numa_node():
    others = [("0-15", 1), ("64-79|96-111", 2)]
    binding, said = binding_beside(TWO_SOCKETS, 2, others)
    assert said is None
    assert binding == "16-31,80-95|32-63,112-127"


def test_where_no_core_is_left_it_shares_and_says_so():
    binding, said = binding_beside(TWO_CORES, 1, [("0-1", 1)])
    assert binding is None
    assert said == (
        "every core of NUMA node 0 is bound by another vLLM replica on this node: this one"
        " shares them"
    )


def test_the_binding_reaches_the_engine_beside_its_kv_cache():
    node = h100_node(gpus=(), adapters=(), fabric=None)
    req = request(nodes=(node,), tensor_parallel=1, cpu_kv_cache_gib=2, cpu_bind="1")
    env = dict(build_launch(req).shards[0].main.env)
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "1")
