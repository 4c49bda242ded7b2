#pragma once
// /proc/<pid>/mountinfo: which mount of the process a superblock device is (the kernel side
// keys file I/O by the file's s_dev; the same major:minor is field 3 of mountinfo).
// Pure parsing plus one bounded read; a malformed line is skipped, never an error.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ithbat::collect::sched_io {

inline constexpr size_t kMaxMountinfoBytes = 1 << 20;
inline constexpr size_t kMaxMounts = 4096;
// The file system root field (compared, never exported) over this skips the line.
inline constexpr size_t kMaxMountFieldBytes = 4096;
// Mount points and fstypes become label values: at most this many bytes (a label value may have
// 1024; a path may have 4096 and a container chooses its mount paths).
inline constexpr size_t kMaxMountLabelBytes = 256;

struct MountEntry {
  uint32_t major = 0;
  uint32_t minor = 0;
  std::string root;         // the path within the file system that is mounted (field 4), unescaped
  std::string mount_point;  // as the process sees it (field 5): unescaped, then SafeMountLabel
  std::string fstype;       // after the " - " separator: SafeMountLabel
};

// A mount path or fstype made safe to export as a label value: valid UTF-8 without control
// characters, at most kMaxMountLabelBytes. A value that needed no change is returned as is.
// Otherwise each control character (C0, DEL, C1) and each byte of invalid UTF-8 becomes '?',
// the result is cut (at a character boundary) to leave room, and "~" plus 16 hex digits of a
// hash of the original bytes is appended, so distinct mounts keep distinct labels. Whoever
// controls a container's mounts controls these bytes.
std::string SafeMountLabel(std::string_view raw);

// Parses mountinfo text (at most kMaxMounts entries; a root field over kMaxMountFieldBytes or a
// malformed line skips the line).
std::vector<MountEntry> ParseMountinfo(std::string_view text);
// Reads and parses <procfs>/<pid>/mountinfo (at most kMaxMountinfoBytes; when the file is longer,
// the line the limit cuts is dropped, not parsed in part); empty when unreadable.
std::vector<MountEntry> ReadMountinfo(const std::filesystem::path& procfs, int32_t pid);

// The kernel's dev_t encoding (what s_dev holds): major in the top 12 bits of 32, minor below.
inline uint32_t KernelDevMajor(uint32_t dev) { return dev >> 20; }
inline uint32_t KernelDevMinor(uint32_t dev) { return dev & 0xfffff; }

// The mount of device (major, minor) among `mounts`: a mount of the file system's root ("/")
// when there is one (several bind mounts of one device share it), else the first. nullptr
// when none matches.
const MountEntry* FindMount(const std::vector<MountEntry>& mounts, uint32_t major, uint32_t minor);

}  // namespace ithbat::collect::sched_io
