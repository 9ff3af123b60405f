// Access across devices (S6) and copies that resolve devices from pointers (S13):
// somaMemPoolSetAccess / GetAccess, and soma's own operations refusing pool memory of another
// device that the pool does not grant them. Runs on every pair of devices present: 2 in the
// cpu test configuration, 4 in the run with SOMA_CPU_DEVICES=4, the GPUs of a GPU machine.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S6_Access : public capi_test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(capi_test::SetUp());
    if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices, " << device_count() << " here";
  }

  /// A stream of `device` (created with that device current; the current device goes back).
  static std::unique_ptr<unique_stream> stream_on(int device) {
    int previous = 0;
    EXPECT_EQ(somaGetDevice(&previous), somaSuccess);
    EXPECT_EQ(somaSetDevice(device), somaSuccess);
    auto stream = std::make_unique<unique_stream>();
    EXPECT_EQ(somaSetDevice(previous), somaSuccess);
    return stream;
  }

  static somaMemAccessFlags access_of(somaMemPool_t pool, int device) {
    somaMemLocation location{somaMemLocationTypeDevice, device};
    somaMemAccessFlags flags = static_cast<somaMemAccessFlags>(-1);
    EXPECT_EQ(somaMemPoolGetAccess(&flags, pool, &location), somaSuccess) << last_message();
    return flags;
  }

  static somaError_t grant(somaMemPool_t pool, int device, somaMemAccessFlags flags) {
    const somaMemAccessDesc desc{{somaMemLocationTypeDevice, device}, flags};
    return somaMemPoolSetAccess(pool, &desc, 1);
  }
};

class S13_CopiesAcrossDevices : public S6_Access {};

TEST_F(S6_Access, OwnerHasReadWriteAndOthersNothingAtFirst) {
  for (int owner = 0; owner < device_count(); ++owner) {
    unique_pool pool(owner);
    for (int device = 0; device < device_count(); ++device) {
      EXPECT_EQ(access_of(pool, device),
                device == owner ? somaMemAccessFlagsProtReadWrite : somaMemAccessFlagsProtNone)
          << "pool of device " << owner << ", device " << device;
    }
    EXPECT_EQ(access_of(default_pool(owner), owner), somaMemAccessFlagsProtReadWrite);
  }
}

TEST_F(S6_Access, GrantsAreReportedAndCanBeRevoked) {
  unique_pool pool(0);
  const int peer = device_count() - 1;
  SOMA_ASSERT_OK(grant(pool, peer, somaMemAccessFlagsProtRead));
  EXPECT_EQ(access_of(pool, peer), somaMemAccessFlagsProtRead);
  SOMA_ASSERT_OK(grant(pool, peer, somaMemAccessFlagsProtReadWrite));
  EXPECT_EQ(access_of(pool, peer), somaMemAccessFlagsProtReadWrite);
  SOMA_ASSERT_OK(grant(pool, peer, somaMemAccessFlagsProtNone));
  EXPECT_EQ(access_of(pool, peer), somaMemAccessFlagsProtNone);
  // Several entries in one call, the owner's own read-write among them.
  std::vector<somaMemAccessDesc> all;
  for (int device = 0; device < device_count(); ++device)
    all.push_back({{somaMemLocationTypeDevice, device}, somaMemAccessFlagsProtReadWrite});
  SOMA_ASSERT_OK(somaMemPoolSetAccess(pool, all.data(), all.size()));
  for (int device = 0; device < device_count(); ++device)
    EXPECT_EQ(access_of(pool, device), somaMemAccessFlagsProtReadWrite) << device;
  SOMA_EXPECT_OK(somaMemPoolSetAccess(pool, nullptr, 0)) << "count 0 changes nothing";
}

TEST_F(S6_Access, TheOwnerKeepsReadWriteAsInCuda) {
  unique_pool pool(0);
  EXPECT_EQ(grant(pool, 0, somaMemAccessFlagsProtNone), somaErrorInvalidDevice);
  EXPECT_TRUE(contains(last_message(), "owns")) << last_message();
  EXPECT_EQ(grant(pool, 0, somaMemAccessFlagsProtRead), somaErrorNotSupported);
  SOMA_EXPECT_OK(grant(pool, 0, somaMemAccessFlagsProtReadWrite));
  EXPECT_EQ(access_of(pool, 0), somaMemAccessFlagsProtReadWrite);
}

TEST_F(S6_Access, BadRequestsAreRejectedAndChangeNothing) {
  unique_stream stream;
  unique_pool pool(0);
  const pool_stats before = read_pool_stats(pool);
  const somaMemAccessDesc good{{somaMemLocationTypeDevice, 1}, somaMemAccessFlagsProtReadWrite};
  EXPECT_EQ(somaMemPoolSetAccess(pool, nullptr, 1), somaErrorInvalidValue);
  struct bad_case {
    const char* name;
    int type;
    int id;
    int flags;
    somaError_t expected;
  } cases[] = {
      {"host location", somaMemLocationTypeHost, 0, 3, somaErrorNotSupported},
      {"host NUMA location", somaMemLocationTypeHostNuma, 0, 3, somaErrorNotSupported},
      {"unknown location type", 42, 1, 3, somaErrorInvalidValue},
      {"invalid location type", 0, 1, 3, somaErrorInvalidValue},
      {"ordinal past the devices", somaMemLocationTypeDevice, device_count(), 3,
       somaErrorInvalidDevice},
      {"negative ordinal", somaMemLocationTypeDevice, -1, 3, somaErrorInvalidDevice},
      {"flags 2", somaMemLocationTypeDevice, 1, 2, somaErrorInvalidValue},
      {"flags 7", somaMemLocationTypeDevice, 1, 7, somaErrorInvalidValue},
  };
  for (const bad_case& c : cases) {
    // The bad entry comes second: the good first entry must not be applied either.
    somaMemAccessDesc descs[2] = {good, {}};
    std::memcpy(&descs[1].location.type, &c.type, sizeof c.type);
    descs[1].location.id = c.id;
    std::memcpy(&descs[1].flags, &c.flags, sizeof c.flags);
    EXPECT_EQ(somaMemPoolSetAccess(pool, descs, 2), c.expected) << c.name;
    EXPECT_FALSE(last_message().empty()) << c.name;
    EXPECT_EQ(access_of(pool, 1), somaMemAccessFlagsProtNone) << c.name << ": entry 0 was applied";
  }
  somaMemAccessFlags flags{};
  somaMemLocation location{somaMemLocationTypeDevice, 1};
  EXPECT_EQ(somaMemPoolGetAccess(nullptr, pool, &location), somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolGetAccess(&flags, pool, nullptr), somaErrorInvalidValue);
  location.id = device_count();
  EXPECT_EQ(somaMemPoolGetAccess(&flags, pool, &location), somaErrorInvalidDevice);
  location = {somaMemLocationTypeHost, 0};
  EXPECT_EQ(somaMemPoolGetAccess(&flags, pool, &location), somaErrorNotSupported);
  expect_unchanged_and_usable(pool, before, stream);
}

// Needs one device only: a list's length is checked before any entry is read.
class S6_AccessListLength : public capi_test {};

TEST_F(S6_AccessListLength, CountPastTheDevicesIsInvalidValueAndChangesNothing) {
  unique_stream stream;
  unique_pool pool(0);
  const pool_stats before = read_pool_stats(pool);
  // A real list one entry longer than there are devices: every entry valid on its own, so only
  // the length can be the reason, and nothing may be applied.
  std::vector<somaMemAccessDesc> longer;
  for (int device = 0; device <= device_count(); ++device)
    longer.push_back(
        {{somaMemLocationTypeDevice, device % device_count()}, somaMemAccessFlagsProtReadWrite});
  EXPECT_EQ(somaMemPoolSetAccess(pool, longer.data(), longer.size()), somaErrorInvalidValue);
  EXPECT_TRUE(mentions_number(last_message(), longer.size(), "")) << last_message();
  EXPECT_TRUE(contains(last_message(), std::to_string(device_count()) + " device"))
      << last_message();
  for (int device = 1; device < device_count(); ++device) {
    somaMemLocation location{somaMemLocationTypeDevice, device};
    somaMemAccessFlags flags = somaMemAccessFlagsProtReadWrite;
    SOMA_EXPECT_OK(somaMemPoolGetAccess(&flags, pool, &location));
    EXPECT_EQ(flags, somaMemAccessFlagsProtNone) << "device " << device << ": entry applied";
  }

  // Counts no list can have: refused before the single entry's neighbours are read.
  const somaMemAccessDesc one{{somaMemLocationTypeDevice, 0}, somaMemAccessFlagsProtReadWrite};
  for (const std::size_t count :
       {SIZE_MAX, SIZE_MAX / sizeof(somaMemAccessDesc) + 1, std::size_t{1} << 40}) {
    EXPECT_EQ(somaMemPoolSetAccess(pool, &one, count), somaErrorInvalidValue) << count;
    EXPECT_TRUE(contains(last_message(), "count " + std::to_string(count))) << last_message();
    EXPECT_EQ(somaMemPoolSetAccess(pool, nullptr, count), somaErrorInvalidValue) << count;
  }
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S6_Access, DestroyedPoolIsInvalidResourceHandle) {
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
  EXPECT_EQ(grant(pool, 1, somaMemAccessFlagsProtReadWrite), somaErrorInvalidResourceHandle);
  somaMemAccessFlags flags{};
  somaMemLocation location{somaMemLocationTypeDevice, 0};
  EXPECT_EQ(somaMemPoolGetAccess(&flags, pool, &location), somaErrorInvalidResourceHandle);
}

TEST_F(S6_Access, AnotherDevicesStreamIsRefusedUntilAccessIsGranted) {
  for (int owner = 0; owner < device_count(); ++owner) {
    for (int user = 0; user < device_count(); ++user) {
      if (user == owner) continue;
      SCOPED_TRACE("pool of device " + std::to_string(owner) + ", stream of device " +
                   std::to_string(user));
      unique_pool pool(owner);
      const auto owner_stream = stream_on(owner);
      const auto user_stream = stream_on(user);
      constexpr std::size_t size = 64 * KiB;
      void* pointer = nullptr;
      SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, *owner_stream));
      SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x11, size, *owner_stream));
      SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
      host_buffer host(size);

      // No access: the other device's stream may neither write nor read it.
      EXPECT_EQ(somaMemsetAsync(pointer, 0x22, size, *user_stream), somaErrorNotPermitted);
      EXPECT_TRUE(contains(last_message(), "may not write")) << last_message();
      EXPECT_TRUE(contains(last_message(), "somaMemPoolSetAccess")) << last_message();
      EXPECT_EQ(somaMemcpyAsync(host.data(), pointer, size, somaMemcpyDeviceToHost, *user_stream),
                somaErrorNotPermitted);
      EXPECT_TRUE(contains(last_message(), "may not read")) << last_message();

      // Read access: reads only.
      SOMA_ASSERT_OK(grant(pool, user, somaMemAccessFlagsProtRead));
      EXPECT_EQ(somaMemsetAsync(pointer, 0x22, size, *user_stream), somaErrorNotPermitted);
      EXPECT_EQ(somaMemcpyAsync(pointer, host.data(), size, somaMemcpyHostToDevice, *user_stream),
                somaErrorNotPermitted);
      const host_buffer seen = read_back(pointer, size, *user_stream);
      EXPECT_EQ(seen.count_not(0x11), 0u) << "a read granted by ProtRead";

      // Read-write access: both, and the owner sees the write.
      SOMA_ASSERT_OK(grant(pool, user, somaMemAccessFlagsProtReadWrite));
      SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x33, size, *user_stream));
      SOMA_ASSERT_OK(somaStreamSynchronize(*user_stream));
      EXPECT_EQ(read_back(pointer, size, *owner_stream).count_not(0x33), 0u);

      // Revoked: refused again; the owner is never refused.
      SOMA_ASSERT_OK(grant(pool, user, somaMemAccessFlagsProtNone));
      EXPECT_EQ(somaMemsetAsync(pointer, 0x44, size, *user_stream), somaErrorNotPermitted);
      SOMA_EXPECT_OK(somaMemsetAsync(pointer, 0x44, size, *owner_stream));
      SOMA_ASSERT_OK(somaFreeAsync(pointer, *owner_stream));
      SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
    }
  }
}

TEST_F(S6_Access, GrantCoversMemoryMappedLaterByGrowth) {
  unique_pool pool(0);
  const auto owner_stream = stream_on(0);
  const auto user_stream = stream_on(1);
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtReadWrite));
  // Allocations well past the first growth step: each new commit must carry the grant.
  const std::size_t size = 4 * granularity_bytes(0) + 4 * MiB;
  std::vector<void*> pointers;
  for (int i = 0; i < 6; ++i) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, *owner_stream));
    pointers.push_back(pointer);
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
  for (std::size_t i = 0; i < pointers.size(); ++i) {
    const auto fill = static_cast<unsigned char>(0x50 + i);
    SOMA_ASSERT_OK(somaMemsetAsync(pointers[i], fill, size, *user_stream)) << i;
    EXPECT_EQ(read_back(pointers[i], size, *user_stream).count_not(fill), 0u) << i;
  }
  for (void* pointer : pointers) SOMA_ASSERT_OK(somaFreeAsync(pointer, *owner_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
}

TEST_F(S6_Access, DefaultPoolIsNotUsableFromAnotherDeviceUntilGranted) {
  const somaMemPool_t pool = default_pool(0);
  const auto owner_stream = stream_on(0);
  const auto user_stream = stream_on(1);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, *owner_stream));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.device, 0) << "the pointer names its owning device";
  EXPECT_EQ(somaMemsetAsync(pointer, 1, 4096, *user_stream), somaErrorNotPermitted);
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtReadWrite));
  SOMA_EXPECT_OK(somaMemsetAsync(pointer, 1, 4096, *user_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*user_stream));
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtNone));  // the fixture's next tests
  SOMA_ASSERT_OK(somaFreeAsync(pointer, *owner_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
}

TEST_F(S6_Access, ValueOperationsNeedAccessToo) {
  unique_pool pool(0);
  const auto owner_stream = stream_on(0);
  const auto user_stream = stream_on(1);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4096, pool, *owner_stream));
  auto* word = static_cast<std::uint32_t*>(pointer);
  SOMA_ASSERT_OK(somaStreamWriteValue32(*owner_stream, word, 5, 0));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
  EXPECT_EQ(somaStreamWriteValue32(*user_stream, word, 6, 0), somaErrorNotPermitted);
  EXPECT_EQ(somaStreamWaitValue32(*user_stream, word, 5, somaStreamWaitValueGeq),
            somaErrorNotPermitted);
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtRead));
  SOMA_EXPECT_OK(somaStreamWaitValue32(*user_stream, word, 5, somaStreamWaitValueGeq));
  EXPECT_EQ(somaStreamWriteValue32(*user_stream, word, 6, 0), somaErrorNotPermitted);
  SOMA_ASSERT_OK(somaStreamSynchronize(*user_stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, *owner_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
}

TEST_F(S6_Access, HostTasksDeclareTheMemoryTheyTouch) {
  unique_pool pool(0);
  const auto owner_stream = stream_on(0);
  const auto user_stream = stream_on(1);
  constexpr std::size_t size = 8 * KiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, *owner_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
  std::atomic<int> ran{0};
  const somaHostFn_t count_run = [](void* data) {
    static_cast<std::atomic<int>*>(data)->fetch_add(1);
  };
  const somaHostAccess reads{pointer, size, somaMemAccessFlagsProtRead};
  const somaHostAccess writes{pointer, size, somaMemAccessFlagsProtReadWrite};

  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &reads, 1),
            somaErrorNotPermitted);
  EXPECT_TRUE(contains(last_message(), "somaLaunchHostFuncWithAccess range 0")) << last_message();
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtRead));
  SOMA_ASSERT_OK(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &reads, 1));
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &writes, 1),
            somaErrorNotPermitted)
      << "read-only access refuses a task that declares writes";
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtReadWrite));
  SOMA_ASSERT_OK(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &writes, 1));
  // The owner's stream, host memory and an empty list need no grant.
  SOMA_ASSERT_OK(somaLaunchHostFuncWithAccess(*owner_stream, count_run, &ran, &writes, 1));
  host_buffer host(64);
  const somaHostAccess host_range{host.data(), host.size(), somaMemAccessFlagsProtReadWrite};
  SOMA_ASSERT_OK(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &host_range, 1));
  SOMA_ASSERT_OK(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, nullptr, 0));
  SOMA_ASSERT_OK(somaStreamSynchronize(*user_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
  EXPECT_EQ(ran.load(), 5) << "each accepted task ran once; refused ones never";

  // Bad declarations: nothing is enqueued.
  const somaHostAccess none{pointer, size, somaMemAccessFlagsProtNone};
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &none, 1),
            somaErrorInvalidValue);
  const somaHostAccess past_end{pointer, size + 1, somaMemAccessFlagsProtRead};
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &past_end, 1),
            somaErrorInvalidValue);
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, nullptr, 1),
            somaErrorInvalidValue);
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, nullptr, &ran, &reads, 1),
            somaErrorInvalidValue);
  // A count no array can have: refused before the list is read.
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*user_stream, count_run, &ran, &reads, SIZE_MAX),
            somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "count")) << last_message();
  SOMA_ASSERT_OK(somaFreeAsync(pointer, *owner_stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*owner_stream));
  const somaHostAccess freed{pointer, size, somaMemAccessFlagsProtRead};
  EXPECT_EQ(somaLaunchHostFuncWithAccess(*owner_stream, count_run, &ran, &freed, 1),
            somaErrorInvalidValue)
      << "a freed allocation is not live";
  SOMA_ASSERT_OK(somaStreamSynchronize(*user_stream));
  EXPECT_EQ(ran.load(), 5);
}

TEST_F(S13_CopiesAcrossDevices, EachPointersDeviceComesFromThePointer) {
  // A copy from a pool of one device into a pool of another, on a stream of a third (or of
  // the destination's) device, whatever the calling thread's current device.
  const int count = device_count();
  for (int from = 0; from < count; ++from) {
    for (int to = 0; to < count; ++to) {
      if (from == to) continue;
      const int runner = (to + 1) % count == from ? to : (to + 1) % count;
      SCOPED_TRACE("from device " + std::to_string(from) + " to " + std::to_string(to) +
                   " on a stream of " + std::to_string(runner));
      unique_pool source_pool(from);
      unique_pool destination_pool(to);
      SOMA_ASSERT_OK(
          grant(source_pool, runner, somaMemAccessFlagsProtReadWrite));  // it uploads too
      SOMA_ASSERT_OK(grant(destination_pool, runner, somaMemAccessFlagsProtReadWrite));
      const auto stream = stream_on(runner);
      constexpr std::size_t size = 96 * KiB + 5;
      host_buffer pattern(size);
      for (std::size_t i = 0; i < size; ++i)
        pattern.data()[i] = static_cast<unsigned char>(i * 31 + from);
      void* source = nullptr;
      void* destination = nullptr;
      SOMA_ASSERT_OK(somaMallocFromPoolAsync(&source, size, source_pool, *stream));
      SOMA_ASSERT_OK(somaMallocFromPoolAsync(&destination, size, destination_pool, *stream));
      // The current device is neither the runner nor (where possible) an owner.
      SOMA_ASSERT_OK(somaSetDevice((runner + count - 1) % count));
      SOMA_ASSERT_OK(
          somaMemcpyAsync(source, pattern.data(), size, somaMemcpyHostToDevice, *stream));
      SOMA_ASSERT_OK(somaMemcpyAsync(destination, source, size, somaMemcpyDefault, *stream));
      const host_buffer copied = read_back(destination, size, *stream);
      ASSERT_EQ(copied.size(), size);
      EXPECT_EQ(std::memcmp(copied.data(), pattern.data(), size), 0);
      somaPointerAttributes attributes{};
      SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, destination));
      EXPECT_EQ(attributes.device, to);
      SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, source));
      EXPECT_EQ(attributes.device, from);
      SOMA_ASSERT_OK(somaFreeAsync(source, *stream));
      SOMA_ASSERT_OK(somaFreeAsync(destination, *stream));
      SOMA_ASSERT_OK(somaStreamSynchronize(*stream));
      SOMA_ASSERT_OK(somaSetDevice(0));
    }
  }
}

TEST_F(S13_CopiesAcrossDevices, CopyWithoutAccessToEitherSideIsRefused) {
  unique_pool source_pool(0);
  unique_pool destination_pool(1);
  const auto stream = stream_on(1);
  void* source = nullptr;
  void* destination = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&source, 4096, source_pool, *stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&destination, 4096, destination_pool, *stream));
  EXPECT_EQ(somaMemcpyAsync(destination, source, 4096, somaMemcpyDeviceToDevice, *stream),
            somaErrorNotPermitted)
      << "device 1's stream cannot read device 0's pool";
  EXPECT_TRUE(contains(last_message(), "somaMemcpyAsync source")) << last_message();
  SOMA_ASSERT_OK(grant(source_pool, 1, somaMemAccessFlagsProtRead));
  SOMA_EXPECT_OK(somaMemcpyAsync(destination, source, 4096, somaMemcpyDeviceToDevice, *stream));
  EXPECT_EQ(somaMemcpyAsync(source, destination, 4096, somaMemcpyDeviceToDevice, *stream),
            somaErrorNotPermitted)
      << "read access does not allow writing the source pool";
  EXPECT_TRUE(contains(last_message(), "somaMemcpyAsync destination")) << last_message();
  SOMA_ASSERT_OK(somaFreeAsync(source, *stream));
  SOMA_ASSERT_OK(somaFreeAsync(destination, *stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(*stream));
}

}  // namespace
