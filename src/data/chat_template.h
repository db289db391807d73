// data/chat_template: a model's chat template (tokenizer_config.json's chat_template, a Jinja template) run on a
// conversation, as transformers' apply_chat_template runs it (jinja2 with trim_blocks and lstrip_blocks).
//
// The Jinja the published templates use (Note [chat templates]): text, {{ expressions }}, {% if / elif / else %},
// {% for x in xs %} (loop.index, index0, first, last, length, revindex; an `if` filter; else), {% set %} (names and
// namespace attributes), comments, whitespace control (-), literals (strings, numbers, lists, dicts, true / false /
// none in either case), names, attributes and subscripts (slices too), calls of methods (strip, split, startswith,
// items, get, ...), filters (trim, length, tojson, upper, lower, default, join, replace, first, last, list, string,
// int), tests (defined, none, string, number, mapping, iterable, sequence, boolean, true, false, odd, even,
// equalto), operators (or and not, == != < <= > >=, in, not in, + - * / // %, ~, a if c else b), and namespace(),
// range(), raise_exception(). Anything else is an error naming it and its line: never a silent difference.
//
//   TT_ASSIGN_OR_RETURN(std::string text,
//                       render_chat(tok.chat_template(), {{"user", "Hi"}}, /*add_generation_prompt=*/true, o));
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace tt {

struct ChatMessage {
  std::string role, content;
};

struct ChatOptions {
  std::string bos_token, eos_token;  // the template's bos_token and eos_token (their text)
};

// The conversation's text. Variables: messages (a list of {role, content}), add_generation_prompt, bos_token,
// eos_token; tools, custom_tools, date_string and strftime_now are not defined (templates then fall back to their
// own defaults, as they do without them in transformers).
Result<std::string> render_chat(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const ChatOptions& o);

}  // namespace tt
