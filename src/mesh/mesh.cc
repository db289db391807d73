#include "mesh/mesh.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/units.h"

namespace tt::mesh {

namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    out.push_back(trim(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

bool is_name(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// A decimal integer in [1, 1 << 20], or -1.
int parse_size(const std::string& s) {
  if (s.empty() || s.size() > 7) return -1;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  const long v = std::stol(s);
  return v >= 1 && v <= (1 << 20) ? static_cast<int>(v) : -1;
}

}  // namespace

Result<MeshShape> MeshShape::parse(const std::string& spec_in) {
  const std::string spec = trim(spec_in);
  TT_RETURN_IF(spec.empty(), kInvalidArgument, "--mesh: empty (give e.g. data=2,model=2)");
  if (const int n = parse_size(spec); n > 0) return MeshShape({{"data", n}});
  std::vector<Dim> dims;
  int64_t product = 1;
  for (const std::string& item : split_list(spec)) {
    const size_t eq = item.find('=');
    TT_RETURN_IF(eq == std::string::npos, kInvalidArgument,
                 "--mesh %s: '%s' is not NAME=SIZE (e.g. data=2,model=2)", spec.c_str(), item.c_str());
    const std::string name = trim(item.substr(0, eq)), size = trim(item.substr(eq + 1));
    TT_RETURN_IF(!is_name(name), kInvalidArgument,
                 "--mesh %s: dimension name '%s' (letters, digits and _ only)", spec.c_str(), name.c_str());
    const int n = parse_size(size);
    TT_RETURN_IF(n < 1, kInvalidArgument, "--mesh %s: dimension %s has size '%s' (a whole number >= 1)",
                 spec.c_str(), name.c_str(), size.c_str());
    for (const Dim& d : dims)
      TT_RETURN_IF(d.name == name, kInvalidArgument, "--mesh %s: dimension %s is named twice", spec.c_str(),
                   name.c_str());
    product *= n;
    TT_RETURN_IF(product > (1 << 20), kInvalidArgument, "--mesh %s: more than %d ranks", spec.c_str(), 1 << 20);
    dims.push_back({name, n});
  }
  return MeshShape(std::move(dims));
}

int MeshShape::ranks() const {
  int n = 1;
  for (const Dim& d : dims_) n *= d.size;
  return n;
}

int MeshShape::index_of(const std::string& name) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].name == name) return static_cast<int>(i);
  return -1;
}

int MeshShape::size_of(const std::string& name) const {
  const int i = index_of(name);
  return i < 0 ? 1 : dims_[static_cast<size_t>(i)].size;
}

std::vector<int> MeshShape::coords(int rank) const {
  std::vector<int> c(dims_.size(), 0);
  for (size_t i = dims_.size(); i-- > 0;) {
    c[i] = rank % dims_[i].size;
    rank /= dims_[i].size;
  }
  return c;
}

int MeshShape::rank_of(const std::vector<int>& coords) const {
  int r = 0;
  for (size_t i = 0; i < dims_.size(); ++i) r = r * dims_[i].size + coords[i];
  return r;
}

std::string MeshShape::to_string() const {
  std::string s;
  for (const Dim& d : dims_) s += (s.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  return s;
}

Status MeshShape::check_ranks(int world_size) const {
  TT_RETURN_IF(world_size != ranks(), kInvalidArgument,
               "--mesh %s needs %d ranks, and this job has %d (start it with tiertrain launch -n %d, or mpirun -n %d)",
               to_string().c_str(), ranks(), world_size, ranks(), ranks());
  return Status::ok();
}

const std::vector<std::string>& Layout::tensor_dims() {
  static const std::vector<std::string> dims = {"batch", "heads", "ff", "vocab", "embed"};
  return dims;
}

Result<Layout> Layout::resolve(const std::string& spec_in, const MeshShape& shape) {
  Layout l;
  const std::string spec = trim(spec_in);
  if (spec.empty()) {
    auto is = [](const std::string& n, std::initializer_list<const char*> names) {
      for (const char* x : names)
        if (n == x) return true;
      return false;
    };
    // The tensor dimensions a model dimension splits by default (Note [tensor parallel] in model/gpt.h).
    static constexpr const char* kModelSplit[] = {"heads", "ff", "vocab"};
    const auto& dims = shape.dims();
    bool named = false;
    for (const Dim& d : dims) {
      if (is(d.name, {"data", "dp", "batch"})) {
        l.rules_["batch"] = d.name;
        named = true;
      } else if (is(d.name, {"model", "tp", "tensor"})) {
        for (const char* t : kModelSplit) l.rules_[t] = d.name;
        named = true;
      }
    }
    if (!named && dims.size() == 1) l.rules_["batch"] = dims[0].name;
    if (!named && dims.size() == 2) {
      l.rules_["batch"] = dims[0].name;
      for (const char* t : kModelSplit) l.rules_[t] = dims[1].name;
    }
  } else {
    for (const std::string& item : split_list(spec)) {
      const size_t colon = item.find(':');
      TT_RETURN_IF(colon == std::string::npos, kInvalidArgument,
                   "--layout %s: '%s' is not TENSOR_DIM:MESH_DIM (e.g. batch:data,heads:model)", spec.c_str(),
                   item.c_str());
      const std::string t = trim(item.substr(0, colon)), m = trim(item.substr(colon + 1));
      const auto& known = tensor_dims();
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      TT_RETURN_IF(std::find(known.begin(), known.end(), t) == known.end(), kInvalidArgument,
                   "--layout %s: '%s' is not a tensor dimension (%s)", spec.c_str(), t.c_str(), list.c_str());
      TT_RETURN_IF(l.rules_.count(t) != 0, kInvalidArgument, "--layout %s: %s is laid out twice", spec.c_str(),
                   t.c_str());
      TT_RETURN_IF(shape.index_of(m) < 0, kInvalidArgument, "--layout %s: %s:%s names no dimension of --mesh %s",
                   spec.c_str(), t.c_str(), m.c_str(), shape.to_string().c_str());
      l.rules_[t] = m;
    }
  }
  // Invariants: batch alone on its mesh dimension; every mesh dimension of more than one rank used.
  if (auto b = l.rules_.find("batch"); b != l.rules_.end())
    for (const std::string& t : tensor_dims())
      TT_RETURN_IF(t != "batch" && l.mesh_dim(t) == b->second, kInvalidArgument,
                   "layout %s: batch and %s are both split over mesh dimension %s (a rank holds one slice of the "
                   "batch and of the model: give them different mesh dimensions)",
                   l.to_string().c_str(), t.c_str(), b->second.c_str());
  for (const Dim& d : shape.dims()) {
    if (d.size == 1) continue;
    bool used = false;
    for (const auto& [t, m] : l.rules_) used = used || m == d.name;
    TT_RETURN_IF(!used, kInvalidArgument,
                 "%s: mesh dimension %s (%d ranks) carries no tensor dimension, so its ranks would repeat each "
                 "other's work; give it one with --layout (e.g. --layout batch:%s)",
                 spec.empty() ? "the default layout" : ("--layout " + spec).c_str(), d.name.c_str(), d.size,
                 d.name.c_str());
  }
  return l;
}

std::string Layout::mesh_dim(const std::string& tensor_dim) const {
  auto it = rules_.find(tensor_dim);
  return it == rules_.end() ? std::string() : it->second;
}

int Layout::ways(const std::string& tensor_dim, const MeshShape& shape) const {
  const std::string m = mesh_dim(tensor_dim);
  return m.empty() ? 1 : shape.size_of(m);
}

Status Layout::check(const MeshShape& shape, const ModelConfig& model, int global_batch) const {
  struct Extent {
    const char* dim;
    int64_t size;
    const char* what;
  };
  const Extent extents[] = {
      {"batch", global_batch, "--batch: sequences a step over all ranks"},
      {"heads", model.heads, "attention heads"},
      {"heads", model.kv_head_count(), "key/value heads (a rank holds whole groups of query heads)"},
      {"ff", model_ffn(model), "MLP width"},
      {"vocab", model.padded_vocab(), "vocabulary rows, padded to a multiple of 128"},
      {"embed", model.dim, "model width (dim)"},
  };
  for (const Extent& e : extents) {
    const int n = ways(e.dim, shape);
    TT_RETURN_IF(n > 1 && e.size % n != 0, kInvalidArgument,
                 "layout %s over mesh %s: %s is %lld (%s), not divisible by the %d ranks of mesh dimension %s",
                 to_string().c_str(), shape.to_string().c_str(), e.dim, static_cast<long long>(e.size), e.what, n,
                 mesh_dim(e.dim).c_str());
  }
  return Status::ok();
}

std::string Layout::to_string() const {
  std::string s;
  for (const std::string& t : tensor_dims())
    if (auto it = rules_.find(t); it != rules_.end()) s += (s.empty() ? "" : ",") + t + ":" + it->second;
  return s.empty() ? "replicated" : s;
}

Result<std::unique_ptr<Mesh>> Mesh::create(const MeshShape& shape, std::unique_ptr<comm::Communicator> world) {
  TT_RETURN_IF(world == nullptr, kInvalidArgument, "Mesh::create: no communicator");
  TT_TRY(shape.check_ranks(world->size()));
  std::unique_ptr<Mesh> m(new Mesh(shape, std::move(world)));
  m->coords_ = shape.coords(m->world_->rank());
  // Per dimension of more than one rank (alike on every rank): the ranks with the same coordinates elsewhere (the
  // color: this rank with that coordinate set to 0), ranked by the coordinate there.
  for (size_t i = 0; i < shape.dims().size(); ++i) {
    if (shape.dims()[i].size == 1) {
      m->along_.push_back(nullptr);
      continue;
    }
    std::vector<int> c = m->coords_;
    c[i] = 0;
    TT_ASSIGN_OR_RETURN(auto sub, m->world_->split(shape.rank_of(c), m->coords_[i]));
    TT_RETURN_IF(sub == nullptr || sub->size() != shape.dims()[i].size || sub->rank() != m->coords_[i], kInternal,
                 "mesh %s: the communicator along %s came out of size %d, rank %d (expected %d, %d)",
                 shape.to_string().c_str(), shape.dims()[i].name.c_str(), sub ? sub->size() : 0,
                 sub ? sub->rank() : -1, shape.dims()[i].size, m->coords_[i]);
    m->along_.push_back(std::move(sub));
  }
  return m;
}

int Mesh::coord(const std::string& dim) const {
  const int i = shape_.index_of(dim);
  return i < 0 ? 0 : coords_[static_cast<size_t>(i)];
}

comm::Communicator* Mesh::along(const std::string& dim) {
  const int i = shape_.index_of(dim);
  return i < 0 ? nullptr : along_[static_cast<size_t>(i)].get();
}

std::string Mesh::describe() const {
  std::string at;
  for (size_t i = 0; i < coords_.size(); ++i)
    at += (at.empty() ? "" : ",") + shape_.dims()[i].name + "=" + std::to_string(coords_[i]);
  return str_format("rank %d of %d at %s", world_->rank(), world_->size(), at.c_str());
}

}  // namespace tt::mesh
