// mesh/mesh: a named device mesh (issue 21, after Mesh TensorFlow): the ranks of a job as an n-D array with named
// dimensions (`--mesh data=2,model=2`), each rank's coordinates, one communicator per dimension, and the layout rules
// that map the model's tensor dimensions (batch, heads, ff, vocab, embed) onto mesh dimensions
// (`--layout batch:data,heads:model,ff:model,vocab:model`), checked against a model before anything runs.
//
//   TT_ASSIGN_OR_RETURN(MeshShape shape, MeshShape::parse("data=2,model=2"));
//   TT_ASSIGN_OR_RETURN(Layout layout, Layout::resolve("", shape));          // the default for these names
//   TT_TRY(layout.check(shape, model, global_batch));                         // an indivisible dimension names itself
//   TT_ASSIGN_OR_RETURN(auto mesh, Mesh::create(shape, std::move(world)));     // collective over the job
//   mesh->along("model")->allreduce(...);                                     // the ranks that differ only there
//
// Ranks are laid out row-major: the last dimension varies fastest, so with data=2,model=2 ranks 0 and 1 share a
// data coordinate (a tensor-parallel pair, on neighbouring local ranks: one node's GPUs), as Megatron orders them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/status.h"
#include "model/model.h"

namespace tt::mesh {

struct Dim {
  std::string name;
  int size = 1;
};

// The shape of a mesh: named dimensions in order. Invariants: at least one dimension; names non-empty, made of
// letters, digits and '_', distinct; every size >= 1.
class MeshShape {
 public:
  // "data=2,model=2" (spaces allowed around the items). A single number N is "data=N".
  static Result<MeshShape> parse(const std::string& spec);
  static MeshShape single() { return MeshShape({{"data", 1}}); }

  int ranks() const;  // the product of the sizes
  const std::vector<Dim>& dims() const { return dims_; }
  int index_of(const std::string& name) const;  // -1 if no such dimension
  int size_of(const std::string& name) const;   // 1 if no such dimension
  // rank in [0, ranks()) <-> coordinates (one per dimension, row-major).
  std::vector<int> coords(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  std::string to_string() const;  // "data=2,model=2"
  // The error when a job's size is not the mesh's.
  Status check_ranks(int world_size) const;

 private:
  explicit MeshShape(std::vector<Dim> dims) : dims_(std::move(dims)) {}
  std::vector<Dim> dims_;
};

// Layout rules: which mesh dimension each tensor dimension is split over (the rest are replicated). Tensor
// dimensions: batch (data parallel), heads (the attention's heads: QKV by columns, its projection by rows), ff (the
// MLP's hidden width), vocab (embedding rows and the LM head's columns), embed (the model width). Invariants: every
// rule's mesh dimension exists; batch shares no mesh dimension with the others (a rank holds one slice of each);
// every mesh dimension of size > 1 carries at least one tensor dimension (else its ranks would repeat each other).
class Layout {
 public:
  static const std::vector<std::string>& tensor_dims();  // batch, heads, ff, vocab, embed
  // From `spec` ("batch:data,heads:model"), or where it is empty the default for the mesh's names: a dimension
  // named data, dp or batch takes batch; model, tp or tensor takes heads, ff and vocab; a mesh of one dimension of
  // another name takes batch; of two, batch on the first and heads, ff, vocab on the second. Otherwise --layout is
  // required.
  static Result<Layout> resolve(const std::string& spec, const MeshShape& shape);

  // The mesh dimension `tensor_dim` is split over, or "" (replicated).
  std::string mesh_dim(const std::string& tensor_dim) const;
  // How many ways `tensor_dim` is split (1: replicated).
  int ways(const std::string& tensor_dim, const MeshShape& shape) const;
  // Every split dimension divides evenly for this model and global batch (sequences a step over all ranks): an error
  // names the dimension, its size and the mesh dimension.
  Status check(const MeshShape& shape, const ModelConfig& model, int global_batch) const;
  std::string to_string() const;  // "batch:data,heads:model,..." in tensor_dims() order

 private:
  std::map<std::string, std::string> rules_;  // tensor dimension -> mesh dimension
};

// The communicators of one rank in a mesh: the world's and, per dimension, the one of the ranks that differ from this
// one in that dimension's coordinate alone (ranked by it).
class Mesh {
 public:
  // Collective over `world` (every rank calls it); world's size must be shape's.
  static Result<std::unique_ptr<Mesh>> create(const MeshShape& shape, std::unique_ptr<comm::Communicator> world);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_->rank(); }
  const std::vector<int>& coords() const { return coords_; }
  int coord(const std::string& dim) const;  // 0 for a dimension the mesh does not have
  comm::Communicator& world() { return *world_; }
  // The communicator along `dim` (its rank is this rank's coordinate there), or nullptr where that dimension has one
  // rank (or the mesh has no such dimension): nothing to communicate.
  comm::Communicator* along(const std::string& dim);
  // "rank 3 of 4 at data=1,model=1".
  std::string describe() const;

 private:
  Mesh(MeshShape shape, std::unique_ptr<comm::Communicator> world) : shape_(std::move(shape)), world_(std::move(world)) {}
  MeshShape shape_;
  std::unique_ptr<comm::Communicator> world_;
  std::vector<int> coords_;
  std::vector<std::unique_ptr<comm::Communicator>> along_;  // by dimension (null for a dimension of size 1)
};

}  // namespace tt::mesh
