# The fuzz targets (tests/fuzz/TARGET.cc) and the library each one reads through: one list for the libFuzzer builds
# (tests/fuzz/CMakeLists.txt) and the replay in every build (tests/CMakeLists.txt).
set(TT_FUZZ_TARGET_LIBS tensorfile:tt_core checkpoint_meta:tt_exec config:tt_exec plan:tt_plan profile:tt_perf
                        dataset:tt_data hf_folder:tt_exec tokenizer:tt_data
                        chat_template:tt_data examples:tt_data)
