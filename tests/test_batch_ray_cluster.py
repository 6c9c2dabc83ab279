"""A Ray batch on a simulated two-node cluster (`ray.cluster_utils.Cluster`) that loses a node mid-batch."""

import io
import json
import logging
import threading
import time

import pytest
import ray
from ray.cluster_utils import Cluster

from anges.batch.progress import PlainDisplay
from anges.batch.ray_engine import RayEngine
from anges.batch.runner import BatchRunner
from anges.batch.tasks import load_tasks
from anges.config.loading import load_config
from anges.store.event_store import EventStore
from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES

STEPS = 8
pytestmark = pytest.mark.xdist_group("ray")  # one Ray at a time on this machine, whatever the test workers


def reply(*actions):
    return {"analysis": "", "reasoning": "next", "actions": list(actions)}


@pytest.mark.sandbox
def test_a_node_that_dies_mid_task_is_retried_there_and_every_task_ends_exactly_once(tmp_path):
    replies = [reply({"action_type": "RUN_SHELL_CMD", "command": f"sleep 0.4; echo step {i}"}) for i in range(STEPS)]
    replies.append(reply({"action_type": "TASK_COMPLETE", "content": "All steps done."}))
    (tmp_path / "r.json").write_text(json.dumps(replies))
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"task {i}"}) + "\n" for i in range(4)))
    specs = load_tasks(path, {"model": f"scripted:{tmp_path / 'r.json'}"})

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})  # the head runs the collector only
    doomed = cluster.add_node(num_cpus=2)
    cluster.add_node(num_cpus=2)  # up before the batch, so the doomed node goes while its runs are mid-way
    ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        runner = BatchRunner(specs, "cluster", RayEngine(load_config(), workers=4, retries=3),
                             display_factory=lambda progress: PlainDisplay(progress, io.StringIO()))
        box = {}
        thread = threading.Thread(target=lambda: box.setdefault("report", runner.run()), daemon=True)
        thread.start()

        store = EventStore()
        deadline = time.monotonic() + 90
        while True:  # wait until all four runs (two on each node) have recorded a few steps here
            assert time.monotonic() < deadline, "no run got going"
            seen = {info.batch_task: store.load(info.uid) for info in store.list() if info.batch_id == "cluster"}
            if sum(len(stream.events_list) >= 3 for stream in seen.values()) == 4:
                break
            time.sleep(0.1)
        cut = {task: len(stream.events_list) for task, stream in seen.items()}
        cluster.remove_node(doomed)
        thread.join(180)
        assert not thread.is_alive(), "the batch did not finish after losing a node"
        assert [row["status"] for row in box["report"].results] == ["completed"] * 4

        streams: dict[str, list] = {}
        for info in store.list():
            streams.setdefault(info.batch_task, []).append(store.load(info.uid))
        assert sorted(streams) == ["t0", "t1", "t2", "t3"]
        resumed = 0
        for task, found in streams.items():
            assert len(found) == 1, f"{task} has {len(found)} streams"
            events = found[0].events_list
            kinds = [event.type for event in events]
            assert kinds.count("task_completion") == 1 and kinds[-1] == "task_completion", kinds  # finishes once
            # the attempt lost with its node is closed as abandoned when the retry takes the stream over
            others = [i for i, e in enumerate(events[:-1]) if e.type in RETURN_TO_PARENT_EVENT_TYPES]
            for index in others:
                assert events[index].data.get("reason") == "abandoned", kinds
                assert kinds[index + 1] == "follow_up_request", kinds
            if "follow_up_request" in kinds:  # continued on the new node after what the old one sent
                resumed += 1
                assert kinds.index("follow_up_request") >= cut.get(task, 0)
                assert "stopped before it was finished" in found[0].events_list[kinds.index("follow_up_request")].content
        assert resumed >= 2  # the two runs that were going on the lost node
    finally:
        ray.shutdown()
        cluster.shutdown()
