// Timeline export: Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev) and an SVG drawing.
//
// Both take a Timeline (timeline.hpp), so a simulated step and a step measured by the executor are
// written the same way and can be laid side by side.
// Chrome trace: one process per pp rank ("rank r"), thread 0 "compute" holds a complete event ("ph": "X")
// per work action named like "F5 s2" (kind, micro-batch, stage), thread 1 "p2p" one per SEND / RECV
// (a RECV spans from when it was posted to when its data arrived). args carry stage and micro-batch, and a
// measured compute span its waits on collectives (comm_wait_arg).
// SVG: ranks as rows, time to the right, one box per work action coloured by kind (lighter shades for
// later chunks of a rank), the micro-batch number in the box, a legend and a time axis; hovering a box
// shows its action and times.
#pragma once

#include <string>

#include "pipeline/schedule.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::pipeline {

struct TraceOptions {
  std::string title;                   // shown in the SVG header and stored in the trace's metadata
  std::string subtitle;                // second SVG header line (e.g. the bubble numbers)
  std::string unit = "ms";             // name of the timeline's time unit
  double microseconds_per_unit = 1000.0;  // Chrome traces are in µs
};

// The args key of a measured span's wait on collective kind k (TimedAction::comm_wait, layers::CommKind order):
// "wait_tp_us", "wait_cp_us", "wait_zero_gather_us", "wait_expert_all_to_all_us". Absent: no wait.
std::string comm_wait_arg(std::size_t k);

// "F5 s2", "SEND_F5 s2", "REDUCE_GRAD s2", "OPTIMIZER_STEP".
std::string trace_event_name(const Action& action);

std::string chrome_trace_json(const Timeline& timeline, const TraceOptions& options = {});
// `schedule` gives the chunk of each stage (for shading); its ranks must match the timeline's.
std::string timeline_svg(const Schedule& schedule, const Timeline& timeline, const TraceOptions& options = {});

// Write the above to `path`; throw Error naming the path when it cannot be written.
void write_chrome_trace(const Timeline& timeline, const std::string& path, const TraceOptions& options = {});
void write_timeline_svg(const Schedule& schedule, const Timeline& timeline, const std::string& path,
                        const TraceOptions& options = {});

}  // namespace cleave::pipeline
