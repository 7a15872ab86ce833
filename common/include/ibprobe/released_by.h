// A std::unique_ptr deleter that hands the object to the C call that frees it: one owning handle
// per verbs, rdma_cm or libc object, whichever library holds it.
#pragma once

namespace ibprobe {

template <auto Release>
struct ReleasedBy {
  template <typename Object>
  void operator()(Object* object) const {
    Release(object);
  }
};

}  // namespace ibprobe
