// The link probe: latency and bandwidth between rank 0 and every other rank,
// measured at start by ping-pong (rank 0 sends, the rank echoes), for the
// pipeline planner (plan/pipeline_plan.h) and the placement map.
//
//   latency   the median of 16 round trips of 8 bytes, halved, each sent
//             after 1 ms of quiet: the echoing rank is then waiting as a
//             pipeline stage waits for rows (comm.cpp's polls sleeping 20 to
//             100 us), so the trip costs what a hop costs there. Sent back to
//             back, the echo caught the rank in its first, spinning polls and
//             the probe read 0 us on one machine where a hop took ~0.1 ms.
//   bandwidth 4 MiB each way, the fastest of 4 round trips: bytes / (round
//             trip / 2) (latency included: a lower bound); the fastest, as
//             where processes share cores the slower trips measure the
//             scheduler, not the link.
//
// Links between two workers are taken to be like their links to rank 0 (one
// switch). Rank 0 probes the ranks one at a time; each waits its turn.
#pragma once

#include <vector>

#include "dist/comm.h"
#include "plan/pipeline_plan.h"

namespace sluice::dist {

// Rank 0. [comm.size()]; [0] is rank 0's own (zero latency, unused).
// Errors: a rank did not answer in time.
StatusOr<std::vector<plan::LinkFigures>> probe_links(Comm& comm);
// Ranks > 0: echoes rank 0's probe messages until it says the probe is done.
Status answer_link_probe(Comm& comm);

}  // namespace sluice::dist
