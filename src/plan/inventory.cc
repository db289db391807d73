#include "plan/inventory.h"

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "memory/device_pool.h"
#include "memory/host_pool.h"

namespace tt {

size_t device_alloc_bytes(const Shape& shape, DType dtype) {
  return memory::device_alloc_size(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
}

void Inventory::add_device(std::string name, Shape shape, DType dtype, TensorClass cls, int layer) {
  add_pooled(std::move(name), kDevice, shape, dtype, cls, layer);
}

void Inventory::add_managed(std::string name, Shape shape, DType dtype, TensorClass cls, int layer) {
  add_pooled(std::move(name), kManaged, shape, dtype, cls, layer);
}

void Inventory::add_pooled(std::string name, Where where, Shape shape, DType dtype, TensorClass cls, int layer) {
  InventoryEntry e;
  e.name = std::move(name);
  e.where = where;
  e.cls = cls;
  e.shape = shape;
  e.dtype = dtype;
  e.layer = layer;
  e.request = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  e.bytes = device_alloc_bytes(shape, dtype);
  if (where == kManaged) e.bytes = (e.bytes + kManagedAlignBytes - 1) / kManagedAlignBytes * kManagedAlignBytes;
  totals_[where] += static_cast<int64_t>(e.bytes);
  per_class_[where][static_cast<int>(cls)] += static_cast<int64_t>(e.bytes);
  index_[e.name] = entries_.size();
  entries_.push_back(std::move(e));
}

void Inventory::add_host(std::string name, size_t bytes, TensorClass cls, bool pageable) {
  InventoryEntry e;
  e.name = std::move(name);
  e.where = kHost;
  e.cls = cls;
  e.pageable = pageable;
  e.shape = Shape{static_cast<int64_t>(bytes)};
  e.request = bytes;
  e.bytes = memory::host_alloc_size(bytes);
  totals_[kHost] += static_cast<int64_t>(e.bytes);
  if (pageable) pageable_ += static_cast<int64_t>(e.bytes);
  per_class_[kHost][static_cast<int>(cls)] += static_cast<int64_t>(e.bytes);
  index_[e.name] = entries_.size();
  entries_.push_back(std::move(e));
}

void Inventory::add_backend_reserved(int64_t bytes) {
  if (bytes <= 0) return;
  InventoryEntry e;
  e.name = "backend.reserved";
  e.where = kDevice;
  e.cls = TensorClass::kWorkspace;
  e.shape = Shape{bytes};
  e.request = e.bytes = static_cast<size_t>(bytes);
  e.backend_owned = true;
  reserved_ += bytes;
  totals_[kDevice] += bytes;
  per_class_[kDevice][static_cast<int>(TensorClass::kWorkspace)] += bytes;
  index_[e.name] = entries_.size();
  entries_.push_back(std::move(e));
}

const InventoryEntry* Inventory::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::string Inventory::describe(Where w) const {
  std::string s;
  for (int c = 0; c < kNumTensorClasses; ++c) {
    if (per_class_[w][c] == 0) continue;
    s += str_format("%s%s %s", s.empty() ? "" : ", ", tensor_class_name(static_cast<TensorClass>(c)),
                    format_bytes(per_class_[w][c]).c_str());
  }
  return s;
}

std::string Inventory::describe_host(bool pageable) const {
  int64_t per_class[kNumTensorClasses] = {};
  for (const InventoryEntry& e : entries_)
    if (e.where == kHost && e.pageable == pageable) per_class[static_cast<int>(e.cls)] += static_cast<int64_t>(e.bytes);
  std::string s;
  for (int c = 0; c < kNumTensorClasses; ++c)
    if (per_class[c] != 0)
      s += str_format("%s%s %s", s.empty() ? "" : ", ", tensor_class_name(static_cast<TensorClass>(c)),
                      format_bytes(per_class[c]).c_str());
  return s;
}

nlohmann::json Inventory::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (int w : {kDevice, kHost, kManaged}) {
    if (w == kManaged && totals_[w] == 0) continue;
    nlohmann::json list = nlohmann::json::array();
    for (const InventoryEntry& e : entries_) {
      if (e.where != w) continue;
      nlohmann::json j = {{"name", e.name}, {"class", tensor_class_name(e.cls)}, {"bytes", e.bytes}};
      if (w != kHost) {
        j["shape"] = e.shape.to_string();
        j["dtype"] = dtype_name(e.dtype);
      }
      if (e.layer >= 0) j["layer"] = e.layer;
      if (e.backend_owned) j["backend_owned"] = true;
      if (e.pageable) j["pageable"] = true;
      list.push_back(std::move(j));
    }
    nlohmann::json classes = nlohmann::json::object();
    for (int c = 0; c < kNumTensorClasses; ++c)
      if (per_class_[w][c] != 0) classes[tensor_class_name(static_cast<TensorClass>(c))] = per_class_[w][c];
    const char* key = w == kDevice ? "device" : w == kHost ? "host" : "managed";
    out[key] = {{"total_bytes", totals_[w]}, {"per_class", classes}, {"entries", list}};
    if (w == kHost) out[key]["pageable_bytes"] = pageable_;
  }
  out["device"]["backend_reserved_bytes"] = reserved_;
  return out;
}

}  // namespace tt
