// `soma replay`'s engine (tools/): the JSON reader, the settings of --try, and replays of
// traces written out here, whose outcome under each setting follows from S9 and S11.
#include <gtest/gtest.h>

#include <string>

#include "json_value.hpp"
#include "recorded_trace.hpp"
#include "trace_replayer.hpp"

namespace {

using namespace soma::tools;

TEST(ReplayJson, ReadsWhatSomaWritesWithExactIntegers) {
  json_value v;
  std::string error;
  ASSERT_TRUE(parse_json(R"({"a":[1,2.5,"x\"y\u0041"],"big":18446744073709551615,"t":true,)"
                         R"("n":null,"o":{}})",
                         &v, &error))
      << error;
  EXPECT_EQ(v.find("a")->items.size(), 3u);
  EXPECT_EQ(v.find("a")->items[2].text, "x\"yA");
  EXPECT_EQ(v.unsigned_or("big"), 18446744073709551615ull);
  EXPECT_TRUE(v.find("t")->boolean);
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(ReplayJson, BadTextIsRefusedWithWhereAndWhat) {
  json_value v;
  std::string error;
  EXPECT_FALSE(parse_json(R"({"a":[1,2)", &v, &error));
  EXPECT_NE(error.find("byte"), std::string::npos) << error;
  EXPECT_FALSE(parse_json("{} x", &v, &error));
  EXPECT_NE(error.find("text after the value"), std::string::npos) << error;
  EXPECT_FALSE(parse_json(std::string(100, '['), &v, &error));
  EXPECT_NE(error.find("nested too deeply"), std::string::npos) << error;
}

TEST(ReplaySettings, ParsesEachKeyAndRefusesTheRest) {
  replay_settings s;
  std::string error;
  ASSERT_TRUE(parse_replay_settings("threshold=64M,follow=0,opportunistic=1,internal=0,compact=1",
                                    &s, &error))
      << error;
  EXPECT_EQ(*s.release_threshold_bytes, std::uint64_t{64} << 20);
  EXPECT_FALSE(*s.follow_event_dependencies);
  EXPECT_TRUE(*s.opportunistic);
  EXPECT_FALSE(*s.internal_dependencies);
  EXPECT_TRUE(*s.compact_before_growth);
  ASSERT_TRUE(parse_replay_settings("threshold=max", &s, &error));
  EXPECT_EQ(*s.release_threshold_bytes, UINT64_MAX);
  EXPECT_FALSE(parse_replay_settings("threshold=lots", &s, &error));
  EXPECT_NE(error.find("not a size"), std::string::npos) << error;
  EXPECT_FALSE(parse_replay_settings("internal=2", &s, &error));
  EXPECT_NE(error.find("key=0 or key=1"), std::string::npos) << error;
  EXPECT_FALSE(parse_replay_settings("speed=1", &s, &error));
  EXPECT_NE(error.find("unknown setting 'speed'"), std::string::npos) << error;
}

/// A trace as soma writes it: one pool of max size max_mib MiB in 1 MiB granules on the cpu
/// backend, two streams (tracks 1 and 2).
std::string trace_of(std::string events, int max_mib = 2) {
  if (!events.empty() && events.back() == ',') events.pop_back();
  const std::string pool = "pool on device 0 #1";
  return R"({"traceEvents":[
{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"pools"}},
{"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"stream 0xa"}},
{"name":"thread_name","ph":"M","pid":0,"tid":2,"args":{"name":"stream 0xb"}},
{"name":"settings","ph":"i","s":"t","ts":0,"pid":0,"tid":0,"args":{"settings":"threshold=0,follow=1,opportunistic=1,internal=1,compact=0,granularity=1048576,max=)" +
         std::to_string(max_mib << 20) + R"(,growth=1048576","pool":")" + pool + R"("}},
)" + events +
         R"(
],"otherData":{"producer":"soma memory history","dropped_events":0,"backend":"cpu","pools":[]}})";
}

std::string event(double ts, int tid, const std::string& name, const std::string& args) {
  return R"({"name":")" + name + R"(","ph":"i","s":"t","ts":)" + std::to_string(ts) +
         R"(,"pid":0,"tid":)" + std::to_string(tid) + R"(,"args":{)" + args +
         R"(,"pool":"pool on device 0 #1"}},)";
}

/// Stream 1 allocates the whole pool and frees it; stream 2 then asks for it all before any
/// synchronize: only an inserted wait (S11 internal dependencies) can serve it.
std::string contended_trace() {
  std::string e;
  e += event(1, 1, "allocate 2.0 MiB", R"("address":"0x100000","bytes":2097152,"reuse":"growth")");
  e += event(2, 1, "free 2.0 MiB", R"("address":"0x100000","bytes":2097152)");
  e += event(3, 2, "allocate 2.0 MiB",
             R"("address":"0x100000","bytes":2097152,"reuse":"internal dependency")");
  e += event(4, 2, "free 2.0 MiB", R"("address":"0x100000","bytes":2097152)");
  e += R"({"name":"pool on device 0 #1","ph":"C","ts":1,"pid":0,"tid":0,)"
       R"("args":{"reserved_bytes":2097152,"used_bytes":2097152}})";
  return trace_of(e);
}

TEST(S11_Replay, TheRecordedSettingsReproduceTheRecordedRun) {
  recorded_trace trace;
  std::string error;
  ASSERT_TRUE(read_recorded_trace(contended_trace(), &trace, &error)) << error;
  EXPECT_EQ(trace.peak_reserved_bytes.begin()->second, std::uint64_t{2} << 20);
  const replay_outcome o = replay_trace(trace, replay_settings{});
  EXPECT_EQ(o.peak_reserved_bytes, std::uint64_t{2} << 20);
  EXPECT_EQ(o.waits, 1u);
  EXPECT_EQ(o.failures, 0u);
  EXPECT_EQ(o.skipped_events, 0u);
}

TEST(S11_Replay, WithoutInternalDependenciesTheSecondStreamFails) {
  recorded_trace trace;
  std::string error;
  ASSERT_TRUE(read_recorded_trace(contended_trace(), &trace, &error)) << error;
  replay_settings no_waits;
  ASSERT_TRUE(parse_replay_settings("internal=0", &no_waits, &error));
  const replay_outcome o = replay_trace(trace, no_waits);
  EXPECT_EQ(o.waits, 0u);
  EXPECT_EQ(o.failures, 1u);  // the pool is at its cap and the free is not known complete
}

TEST(S11_Replay, WithoutOpportunisticReuseAnotherStreamsCompletedFreeCostsGrowth) {
  // Recorded: stream 2 reused stream 1's free, which had already run (opportunistic).
  std::string e;
  e += event(1, 1, "allocate 2.0 MiB", R"("address":"0x100000","bytes":2097152,"reuse":"growth")");
  e += event(2, 1, "free 2.0 MiB", R"("address":"0x100000","bytes":2097152)");
  e += event(3, 2, "allocate 2.0 MiB",
             R"("address":"0x100000","bytes":2097152,"reuse":"opportunistic")");
  e += event(4, 2, "free 2.0 MiB", R"("address":"0x100000","bytes":2097152)");
  e += event(5, 2, "stream synchronize", R"("x":0)");
  recorded_trace trace;
  std::string error;
  ASSERT_TRUE(read_recorded_trace(trace_of(e, 4), &trace, &error)) << error;
  const replay_outcome recorded = replay_trace(trace, replay_settings{});
  EXPECT_EQ(recorded.peak_reserved_bytes, std::uint64_t{2} << 20);
  EXPECT_EQ(recorded.synchronizes, 1u);
  replay_settings strict;
  ASSERT_TRUE(parse_replay_settings("opportunistic=0,internal=0", &strict, &error));
  EXPECT_EQ(replay_trace(trace, strict).peak_reserved_bytes, std::uint64_t{4} << 20);
}

TEST(ReplayTrace, AnythingButSomasTraceIsRefused) {
  recorded_trace trace;
  std::string error;
  EXPECT_FALSE(read_recorded_trace(R"({"traceEvents":[]})", &trace, &error));
  EXPECT_NE(error.find("not a trace of soma's memory history"), std::string::npos) << error;
  EXPECT_FALSE(read_recorded_trace("not json", &trace, &error));
}

}  // namespace
