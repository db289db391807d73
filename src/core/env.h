// core/env: the one registry of the environment variables tiertrain reads. Each is declared once, in env.cc's table
// (name, default, what it does, kind), as NCCL declares its NCCL_PARAMs; nothing else in the product calls getenv
// (tests/repo/test_env_registry.py fails when something does). A variable that is set is logged once, at INFO, when
// it is first read; `tiertrain --print-config` lists them all with their values.
//
//   if (const char* id = env::get("TIERTRAIN_COMM_ID")) ...   // nullptr: unset or empty
//   const std::string backend = env::get_or("TIERTRAIN_COMM_BACKEND", "auto");
//
// The run's knobs (`steps`, `device_budget`, ... as TIERTRAIN_STEPS, TIERTRAIN_DEVICE_BUDGET) are the config
// registry's (core/config.h), which reads them through env::environment(); this table holds the variables that are
// not knobs: the communicator's, the launchers', the machine's and the test hooks.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tt::env {

enum class Kind {
  kSetting,   // a setting of ours, TIERTRAIN_*
  kInternal,  // set by tiertrain for a process it starts (launch's ranks, a re-executed program); not for users
  kTestHook,  // changes timing or failure behaviour for the tests; no effect unless set
  kOutside,   // another program's or the system's (launchers, OpenBLAS, XDG), read, never set by users for us
};
const char* kind_name(Kind k);

struct Param {
  std::string_view name;
  std::string_view default_text;  // what applies when it is unset, in words or as a value
  std::string_view help;
  Kind kind = Kind::kSetting;
  std::string_view old_name = {};  // an earlier name that still works, with a warning
};

// Every declared variable, in the table's order.
std::span<const Param> params();
const Param* find(std::string_view name);

// The value of the declared variable `name` (or of its old name), or nullptr when it is unset or empty. Reading a
// variable that is not declared is a programming error: it aborts, naming it.
const char* get(std::string_view name);
std::string get_or(std::string_view name, std::string_view fallback);
bool is_set(std::string_view name);

// The process's environment, for the config registry's TIERTRAIN_<KNOB> variables (Config::load_env).
char** environment();

// The table as text: name, kind, value (or "unset"), default and help, one variable a few lines, wrapped to width.
std::string describe(int width = 100);

}  // namespace tt::env
