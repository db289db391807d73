#include "data/finetune.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"

namespace tt::data {
namespace {

using nlohmann::json;

void append(const std::vector<int32_t>& ids, bool counts, std::vector<uint32_t>* out, FinetuneStats* stats) {
  for (int32_t id : ids) out->push_back(static_cast<uint32_t>(id) | (counts ? 0u : kNoLoss));
  stats->tokens += static_cast<int64_t>(ids.size());
  if (counts) stats->counted += static_cast<int64_t>(ids.size());
}

}  // namespace

bool is_examples_file(const std::string& path) { return path.size() > 6 && path.ends_with(".jsonl"); }

// Note [fine-tuning examples]: a conversation's text is cut where each assistant message's part begins and ends
// (the template run on the messages before it with the generation prompt, and on those up to it: the assistant's
// part is what the second adds to the first), and each piece is encoded on its own, the assistant's counted. The
// templates put special tokens at those places, so the pieces encode as the whole text does. A template whose
// shorter run is not the start of the longer one (one that rewrites earlier messages) is refused, named.
Status tokenize_example(std::string_view line, const Tokenizer& tok, const std::string& where,
                        std::vector<uint32_t>* ids, FinetuneStats* stats) {
  const json j = json::parse(line, nullptr, false);
  TT_RETURN_IF(j.is_discarded() || !j.is_object(), kDataLoss, "%s: not a JSON object", where.c_str());
  const auto text_of = [&](const json& o, const char* key, std::string* out) -> Status {
    const auto it = o.find(key);
    TT_RETURN_IF(it == o.end() || !it->is_string(), kDataLoss, "%s: \"%s\" is %s, not a string", where.c_str(), key,
                 it == o.end() ? "missing" : it->dump().substr(0, 60).c_str());
    *out = it->get<std::string>();
    return Status::ok();
  };
  if (j.contains("messages")) {
    const json& m = j["messages"];
    TT_RETURN_IF(!m.is_array() || m.empty(), kDataLoss, "%s: \"messages\" is not a list of messages", where.c_str());
    TT_RETURN_IF(tok.chat_template().empty(), kFailedPrecondition,
                 "%s: a conversation (\"messages\") needs the model's chat template: no chat_template in a "
                 "tokenizer_config.json beside the tokenizer",
                 where.c_str());
    std::vector<ChatMessage> messages;
    for (const json& x : m) {
      TT_RETURN_IF(!x.is_object(), kDataLoss, "%s: a message is %s, not an object", where.c_str(),
                   x.dump().substr(0, 60).c_str());
      ChatMessage msg;
      TT_TRY(text_of(x, "role", &msg.role));
      TT_TRY(text_of(x, "content", &msg.content));
      messages.push_back(std::move(msg));
    }
    ++stats->examples;
    // The text up to each assistant message, and with it (Note [fine-tuning examples]).
    ChatOptions o;
    o.bos_token = tok.bos_text();
    const std::vector<int32_t> eos = {tok.end_of_text()};
    if (tok.end_of_text() >= 0) {
      TT_ASSIGN_OR_RETURN(o.eos_token, tok.decode(eos));
    }
    size_t done = 0;  // bytes of the whole conversation's text encoded so far
    TT_ASSIGN_OR_RETURN(std::string whole, render_chat(tok.chat_template(), messages, false, o));
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].role != "assistant") continue;
      const std::vector<ChatMessage> before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
      const std::vector<ChatMessage> upto(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i + 1));
      TT_ASSIGN_OR_RETURN(std::string head, render_chat(tok.chat_template(), before, true, o));
      TT_ASSIGN_OR_RETURN(std::string with, render_chat(tok.chat_template(), upto, false, o));
      TT_RETURN_IF(!with.starts_with(head) || !whole.starts_with(with) || head.size() < done, kFailedPrecondition,
                   "%s: the chat template does not lay out the conversation message by message (its text before "
                   "assistant message %zu is not the start of the text with it): its assistant parts cannot be "
                   "told apart",
                   where.c_str(), i);
      append(tok.encode(std::string_view(whole).substr(done, head.size() - done)), false, ids, stats);
      append(tok.encode(std::string_view(whole).substr(head.size(), with.size() - head.size())), true, ids, stats);
      done = with.size();
    }
    append(tok.encode(std::string_view(whole).substr(done)), false, ids, stats);
    return Status::ok();
  }
  std::string prompt, completion;
  TT_RETURN_IF(!j.contains("prompt") || !j.contains("completion"), kDataLoss,
               "%s: an example is {\"prompt\": ..., \"completion\": ...} or {\"messages\": [...]}; this one has "
               "neither",
               where.c_str());
  TT_TRY(text_of(j, "prompt", &prompt));
  TT_TRY(text_of(j, "completion", &completion));
  TT_RETURN_IF(tok.end_of_text() < 0, kFailedPrecondition,
               "%s: the tokenizer names no end-of-text token to end a completion with (eos_token in "
               "tokenizer_config.json)",
               where.c_str());
  ++stats->examples;
  std::vector<int32_t> head = tok.text_prefix();
  for (int32_t id : tok.encode(prompt)) head.push_back(id);
  append(head, false, ids, stats);
  std::vector<int32_t> tail = tok.encode(completion);
  tail.push_back(tok.end_of_text());
  append(tail, true, ids, stats);
  return Status::ok();
}

Status tokenize_examples(const std::string& path, const Tokenizer& tok, std::vector<uint32_t>* out,
                         FinetuneStats* stats) {
  std::ifstream in(path, std::ios::binary);
  TT_RETURN_IF(!in, kIoError, "cannot read '%s': %s", path.c_str(), std::strerror(errno));
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    TT_TRY(tokenize_example(line, tok, path + " line " + std::to_string(number), out, stats));
  }
  TT_RETURN_IF(in.bad(), kIoError, "reading '%s' failed: %s", path.c_str(), std::strerror(errno));
  return Status::ok();
}

}  // namespace tt::data
