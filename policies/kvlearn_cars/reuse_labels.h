// Reuse labels for the kvlearn-cars model: per block, an open "label window"
// holding the model inputs and the predicted P of the moment it opened, which
// closes as a positive label if the block is used again within the horizon H
// and as a negative one otherwise.
//
// A window opens when a block is admitted and again at each hit, once the
// caller has closed the previous one as positive.
// Reopening at hits is what the paper's public code does too ("one label per
// reuse episode"); without it the model would only see admission-time vectors
// (one access, no gaps) yet score hits. The caller closes a window positive
// at a hit within H, and negative when the block is evicted before H; windows
// that reach H unused are found lazily: every opening is queued in a FIFO by
// start time, and CloseNextExpired pops entries older than H, skipping those
// whose window has since closed or reopened (a per-block generation number
// tells them apart). Blocks refused admission get no window.
//
// Open windows are also the pool's "live" data: blocks admitted or hit within
// the last H. open_bytes() is their total size.
//
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "policies/kvlearn_cars/model_inputs.h"

namespace kvlearn {

class ReuseLabels {
 public:
  struct Label {
    BlockIndex block;
    CarsRawInputs inputs;  // as when the window opened
    float predicted;       // the P predicted when the window opened
    bool reused;
  };

  // Keeps a reference to `catalog` (for block sizes); windows older than
  // horizon_ms expire.
  ReuseLabels(const BlockCatalog& catalog, int64_t horizon_ms);

  // Makes room for every block the catalog holds now; call after blocks are
  // added. Blocks not covered yet must not be passed to the calls below.
  void GrowToCatalog();

  bool IsOpen(BlockIndex b) const { return open_[b] != 0; }

  // Opens b's window at now_ms, with the inputs and P scored now. If it is
  // already open, the new window replaces the old one, which then never
  // yields a label. REQUIRES: now_ms not before any earlier Open.
  void Open(BlockIndex b, const CarsRawInputs& inputs, float predicted, int64_t now_ms);

  // Closes b's window with the given outcome.
  // REQUIRES: IsOpen(b).
  Label Close(BlockIndex b, bool reused);

  // Closes, as negative, the oldest window that opened more than H before
  // now_ms and is still open; nullopt when there is none left.
  std::optional<Label> CloseNextExpired(int64_t now_ms);

  uint64_t open_bytes() const { return open_bytes_; }

  // The open windows oldest first (block through `renumber`, start, inputs,
  // P), for snapshots (core/policy_state.h; cars_state.cc). Handled and
  // replaced openings are left out: they would never yield a label.
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const;
  // REQUIRES: no window opened yet.
  void Load(PolicyStateReader& in);

 private:
  struct Opening {
    int64_t start_ms;
    BlockIndex block;
    uint32_t generation;
  };

  const BlockCatalog& catalog_;
  int64_t horizon_ms_;
  // Per block: its window (inputs and P at the start), whether it is open,
  // and how many times it has opened.
  std::vector<CarsRawInputs> inputs_;
  std::vector<float> predicted_;
  std::vector<uint32_t> generation_;
  std::vector<uint8_t> open_;
  // Every opening, oldest first; entries before head_ have been handled.
  std::vector<Opening> openings_;
  size_t head_ = 0;
  uint64_t open_bytes_ = 0;
};

}  // namespace kvlearn
