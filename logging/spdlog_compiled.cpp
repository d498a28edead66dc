// spdlog (Debian's libspdlog-dev), compiled once into ccrun's own static
// library instead of linked as libspdlog.so.
//
// Why: every ccrun launch pays for a shared library at load time, used or
// not: libspdlog.so's relocations, symbol tables and the code pages around
// them were 520 KiB of the launcher's resident memory, a tenth of it, while
// ccrun uses one logger, one sink and a few level calls. Compiled here, the
// linker keeps only what ccrun calls. Header-only mode would do the same but
// compiles spdlog's implementation in every file that logs (+7 s each, over
// 100 files, three builds in CI); here it is compiled once.
//
// Every ccrun target sees spdlog through ccrun_spdlog (logging/CMakeLists.txt),
// which defines SPDLOG_COMPILED_LIB: its headers then declare, and this file
// defines, by including spdlog's own implementation headers (*-inl.h) and
// instantiating the templates ccrun uses.
#ifndef SPDLOG_COMPILED_LIB
#error "build this file through the ccrun_spdlog target, which defines SPDLOG_COMPILED_LIB"
#endif

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

#include <mutex>

// The templates the headers leave to the compiled library: the logger's
// constructor from a list of sinks, the sink bases, and the colour console
// sinks (the default logger's, and stderr_color_mt's).
template spdlog::logger::logger(std::string name, spdlog::sinks_init_list::iterator begin,
                                spdlog::sinks_init_list::iterator end);
template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::base_sink<spdlog::details::null_mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_nullmutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_nullmutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_nullmutex>;
template std::shared_ptr<spdlog::logger> spdlog::stderr_color_mt<spdlog::synchronous_factory>(
    const std::string& logger_name, color_mode mode);
template std::shared_ptr<spdlog::logger> spdlog::stdout_color_mt<spdlog::synchronous_factory>(
    const std::string& logger_name, color_mode mode);
