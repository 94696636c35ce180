#pragma once

namespace kv_disagg {

// Each reads the scheduler's commands on stdin and answers on stdout, one line each.
int run_decode(bool grants);
int run_prefill();

}  // namespace kv_disagg
