// The cost model most tests run on: Llama-3-8B on the `a100` profile (the
// command line's defaults), built once.
#pragma once

#include "core/cost_model.h"

namespace kvlearn {

inline const CostModel& DefaultCost() {
  static const CostModel cost(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  return cost;
}

}  // namespace kvlearn
