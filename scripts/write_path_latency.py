#!/usr/bin/env python3
"""Latency breakdown of single-client writes from the members' `revkv::write_path` trace events.

usage: write_path_latency.py MEMBER_LOG...

Each log is one member's JSON log (`revkv serve --log-format json`) with the target
`revkv::write_path` at `trace` (raft/src/write_path_trace.rs). Events of one write are joined by
log index; the leader is the member whose log has `Written` events. For every write the leader
answered, the stages are timed from its `Submitted` event (the latest one before the write's
`Appended`), and the follower whose answer arrived first is the one on the critical path. Prints
the median, 10th and 90th percentile of each step in microseconds. Only meaningful with one client
(one write in flight): with more, writes share appends, sends and applies.
"""

import bisect
import collections
import datetime
import json
import statistics
import sys

STEPS = [
    ("submitted -> appended (leader)", "submitted", "appended"),
    ("appended -> sent", "appended", "sent"),
    ("appended -> durable (leader's fsync)", "appended", "durable"),
    ("sent -> received (peer hop)", "sent", "f_received"),
    ("received -> appended (follower)", "f_received", "f_appended"),
    ("appended -> durable (follower's fsync)", "f_appended", "f_durable"),
    ("durable -> answered (follower)", "f_durable", "f_answered"),
    ("answered -> replied (peer hop back)", "f_answered", "replied"),
    ("replied -> applying (commit)", "replied", "applying"),
    ("applying -> applied", "applying", "applied"),
    ("applied -> written", "applied", "written"),
    ("submitted -> written (total)", "submitted", "written"),
]


def microseconds(timestamp):
    moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return moment.timestamp() * 1e6


def read_events(path):
    """(stage, index) -> first time, and the sorted times of `Submitted`."""
    stages, submitted = {}, []
    for line in open(path, errors="replace"):
        if '"revkv::write_path"' not in line:
            continue
        event = json.loads(line)
        stage, index = event["fields"]["stage"], event["fields"]["index"]
        at = microseconds(event["timestamp"])
        if stage == "Submitted":
            submitted.append(at)
        else:
            stages.setdefault((stage, index), at)
    return stages, sorted(submitted)


def one_write(index, leader, followers):
    stages, submitted = leader
    get = lambda name: stages.get((name, index))
    times = {name.lower(): get(name) for name in
             ["Appended", "Durable", "Sent", "Replied", "Applying", "Applied", "Written"]}
    if times["appended"] is None or times["written"] is None:
        return None
    before = bisect.bisect_right(submitted, times["appended"]) - 1
    if before < 0:
        return None
    times["submitted"] = submitted[before]
    answers = []
    for follower_stages, _ in followers:
        names = ["Received", "Appended", "Durable", "Answered"]
        follower = [follower_stages.get((name, index)) for name in names]
        if None not in follower:
            answers.append(follower)
    if answers:
        received, appended, durable, answered = min(answers, key=lambda times: times[3])
        times.update(f_received=received, f_appended=appended, f_durable=durable,
                     f_answered=answered)
    return times


def main(paths):
    members = [read_events(path) for path in paths]
    leaders = [member for member in members if any(s == "Written" for s, _ in member[0])]
    if len(leaders) != 1:
        sys.exit(f"expected one leader's log with Written events, found {len(leaders)}")
    leader = leaders[0]
    followers = [member for member in members if member is not leader]
    samples = collections.defaultdict(list)
    written = [index for stage, index in leader[0] if stage == "Written"]
    for index in written:
        times = one_write(index, leader, followers)
        if times is None:
            continue
        for label, start, end in STEPS:
            if times.get(start) is not None and times.get(end) is not None:
                samples[label].append(times[end] - times[start])
    print(f"{len(written)} writes; microseconds: p50, p10, p90")
    for label, _, _ in STEPS:
        values = sorted(samples.get(label, []))
        if values:
            print(f"  {label:42s} {statistics.median(values):8.1f} "
                  f"{values[len(values) // 10]:8.1f} {values[len(values) * 9 // 10]:8.1f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
