/* The docs/design.md §4 traffic model: the bytes one decode step must move between
 * memory and the cores, counted from the model alone. `rssm bench` divides
 * these by the measured time to report GB/s; docs/bench.md explains each
 * term. */
#ifndef RH_TRAFFIC_H
#define RH_TRAFFIC_H

#include "rssm.h"

#include <stdint.h>

/* Bytes one batch row moves in one step over all layers, when it finds
 * `write_pos` committed ring entries and `is_flush` says whether the step
 * writes the checkpoint. With replay off (packed decode) write_pos must be 0
 * and is_flush 1: read S, write S.
 *
 *   state   read C every step, write C on a flush       HV*V*K*state
 *   ring    read write_pos entries; append one if not a flush
 *           entry = HV*V*ring (d) + H*K*ring (k, one per q/k head)
 *                 + HV*G*4 (g; G = 1 for GDN, K for KDA)
 *   io      q, k: H*K*io each; v, out: HV*V*io each; gate HV*G*4; beta HV*4
 *
 * Gate weights (RAW modes, [layers][HV] + dt_bias) are read once per layer
 * per step, not per row, and are left out: they are < 0.01% of a step. */
double rh_traffic_row_bytes(const rssm_model *m, uint32_t write_pos, int is_flush);

/* Average bytes per row per step over one whole ring cycle: positions
 * 0..L-2 append, position L-1 flushes (L = 1 or replay off: every step is a
 * flush). */
double rh_traffic_cycle_row_bytes(const rssm_model *m);

#endif
