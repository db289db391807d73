// apps/generate: what a trained model says. A checkpoint's parameters go into an in-core model of batch 1 on the
// chosen backend; tokens are then drawn one at a time from the logits of the context's last position (temperature,
// top-k), each new token run through the blocks alone against the cached keys and values of the context (Note
// [KV cache] in model/gpt.h), the context restarting from its last half once it fills the model's sequence length.
// Text corpora (vocabulary 256) give bytes, printed as text; token shards give token ids, printed as text with their
// tokenizer (--tokenizer: a tokenizer.json or GPT-2's files, data/tokenizer.h) and as numbers without one.
//
//   SampleOptions o;
//   o.prompt = "Q: ";
//   TT_ASSIGN_OR_RETURN(SampleResult s, sample_checkpoint("runs/20261202-101500", o));  // a run, a folder or a file
//   std::fputs(s.text.c_str(), stdout);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"

namespace tt {

struct SampleOptions {
  std::string prompt;         // bytes of a text model; empty: a newline
  int64_t tokens = 200;       // drawn after the prompt
  double temperature = 0.8;   // > 0; lower is more conservative
  int top_k = 0;              // draw among the k likeliest (0: all)
  uint64_t seed = 1337;
  std::string backend = "auto";
  std::string dtype = "auto";
  int threads = 0;
  std::string vocab_file;     // the tokenizer (Tokenizer::load): a prompt read as text, token ids printed as text
  bool kv_cache = true;       // Note [KV cache] (model/gpt.h); false: a forward over the whole context per token
  bool cuda_graph = true;     // a decode step recorded once and replayed (CUDA); false: enqueued kernel by kernel
  bool allow_nonfinite = false;  // a checkpoint holding NaN or infinity loaded anyway (check_finite_tensor)
};

struct SampleResult {
  std::string checkpoint;      // the file read
  int64_t step = 0;            // its step
  bool bytes = true;           // tokens are bytes (a text model); else token ids
  std::vector<int32_t> tokens; // the prompt's, then the drawn ones
  int64_t prompt_tokens = 0;
  std::string text;            // the bytes as they are (bytes), the decoded text (vocab_file), or the ids
  double seconds = 0;          // drawing, after loading
  int64_t prefills = 0;        // forwards over a whole context (the first token, each restart, every token uncached)
  // Where the drawing time went: enqueuing the passes (host), waiting for them and the logits' copy (device), the
  // draws (host).
  double enqueue_seconds = 0, wait_seconds = 0, draw_seconds = 0;
};

// Draws o.tokens tokens after o.prompt from the model of checkpoint `where` (resolve_checkpoint in
// exec/checkpoint.h: a file, a checkpoint folder or a run folder). The same
// checkpoint, options and backend give the same tokens.
Result<SampleResult> sample_checkpoint(const std::string& where, const SampleOptions& o);

struct EvalOptions {
  std::string data;          // a text file or folder, or token shards (as --data)
  std::string split = "all";  // all (every token), val or train (the splits a run with val_fraction makes)
  double val_fraction = 0.05;
  std::string tokenizer;     // text read through this tokenizer (Tokenizer::load) for a token model; else bytes
  bool allow_nonfinite = false;  // a checkpoint holding NaN or infinity loaded anyway (check_finite_tensor)
  int batch = 8;             // sequences per forward
  int64_t batches = 0;       // at most this many batches (0: every whole batch the data holds)
  std::string backend = "auto";
  std::string dtype = "auto";
  int threads = 0;
  // Golden checks against another implementation (tools/hf_golden.py): each scored token's loss kept (in the
  // windows' order), and the gradient of the mean loss over the batches with respect to every parameter written as
  // a Hugging Face folder (f32 safetensors named as the family exports its weights; f32 gradients, no update).
  bool token_losses = false;
  std::string grads_out;
  // The logits of every scored position, f32, written as a NumPy array [windows, seq, vocab] (windows: batches x
  // batch, in the order scored) to this .npy file, computed logits_chunk_rows positions at a time (0: as many as 64
  // MiB of logits hold).
  std::string logits_out;
  int64_t logits_chunk_rows = 0;
};

struct EvalResult {
  std::string checkpoint;
  int64_t step = 0;
  int64_t batches = 0, tokens = 0;  // scored
  double loss = 0;                  // mean cross-entropy, nats per token
  double seconds = 0;
  std::vector<float> token_losses;  // with EvalOptions::token_losses: batches x batch x seq, as the model computed them
};

// The mean loss of the model of checkpoint `where` on o.data (split all: every token of the file(s); val or train:
// that split as a run with o.val_fraction makes it), in consecutive windows of the model's context from the start,
// in-core at o.batch sequences a forward. With the run's batch and --eval-batches, `val` is the run's validation.
Result<EvalResult> evaluate_checkpoint(const std::string& where, const EvalOptions& o);

// The draw itself, over logits[0, vocab): softmax of logits / temperature over the top_k largest (0: all), then the
// token whose cumulative probability first exceeds u in [0, 1), the tokens taken likeliest first (ties: the lower
// first) with a top-k, in token order without one (no sort of the whole vocabulary).
int32_t draw_token(const float* logits, int vocab, double temperature, int top_k, double u);

}  // namespace tt
