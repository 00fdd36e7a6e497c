// The fused small-batch launch of a GDN or KDA replay verify (issue 16, item 4): one kernel per
// layer does the conv of the channels each CTA reads and the recurrence, where the two-kernel
// path runs launch_conv_update and then launch_gdn_recurrence / launch_kda_recurrence. Same
// arithmetic (the conv's helpers and the recurrence's token step), so the results are
// bit-identical to the two launches and to the snapshot strategy. Host-safe declarations; the
// kernel lives in gdn_fused.cuh.
//
// Who writes the conv's committed window and records: a CTA (row, value head, V block) reads q
// and k of its key head, which every CTA of the key head reads too, and its own v rows. It
// writes its v channels itself after its reads; the q and k channels are written by the key
// head's last CTA to finish reading (an arrival counter per (row, key head) in `counters`, which
// that CTA sets back to 0), so no CTA reads a window or record another has already advanced.
// A programmatic launch counts its arrivals before it waits for the kernel before it (its reads of
// the committed windows and records are all there), so consecutive fused launches must use
// different counters (the CUDA backend alternates two sets): the one before may still be
// counting; the one before that has completed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "conv_update.h"
#include "gdn_recurrence.h"
#include "kernel_types.h"

namespace specstate::kernels {

struct GdnFusedParams {
  GdnRecurrenceParams rec;      // a replay chain verify's recurrence, as for the two launches
  ConvUpdateParams conv;        // its conv (conv.out: written only where write_conv_out)
  int32_t* counters = nullptr;  // [rows, num_k_heads] device, zero between launches; not the
                                // previous fused launch's (see above)
  bool write_conv_out = false;  // the caller asked for conv_out
  // Launch as a programmatic dependent of the kernel before it in the stream (common.cuh): the
  // kernel reads the slot, cursor, committed state and window, history records and pending
  // steps' records of its layer and its weights, and counts its arrival, before it waits for that
  // kernel, and x, the gates and every write of the layer's memory after. The caller sets it only
  // where that kernel writes none of the former (the CUDA backend: another layer's kernel).
  bool programmatic = false;
};

// Whether the fused kernel runs this launch: it can serve it (a replay verify of a chain on
// device slots, no snapshots, no parents, no final store; history + window within one chunk:
// ring <= kGdnChunk; K = 128, conv width 4, bf16 activations and conv state, f32 SSM state,
// specstate's element order (channels-first windows, [HV][V][K] states),
// counters given) and gdn_fused_choice picks it (the measured rule, or SPECSTATE_GDN_FUSED=0 / 1).
// Otherwise the caller runs the two launches.
bool gdn_fused_chosen(const GdnFusedParams& params, ElemType act, ElemType conv_state,
                      ElemType ssm_state);

// Runs the fused kernel (gdn_fused_chosen must hold); kda: the KDA layer (the gate per key
// channel). Launched in plain stream order, or as a programmatic dependent (params.programmatic).
cudaError_t launch_gdn_fused(const GdnFusedParams& params, bool kda, cudaStream_t stream);

}  // namespace specstate::kernels
