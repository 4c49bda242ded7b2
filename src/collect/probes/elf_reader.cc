#include "collect/probes/elf_reader.h"

#include <cerrno>
#include <cstring>

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_util.h"

namespace ithbat::collect::probes {
namespace {

using Fd = UniqueFd;

// Whether [offset, offset + n) lies inside a file of `file_size` bytes. Checked BEFORE any
// buffer is sized from a header field, so a tiny file that claims huge tables costs nothing.
bool InFile(uint64_t file_size, uint64_t offset, uint64_t n) {
  return offset <= file_size && n <= file_size - offset;
}

// Reads exactly [offset, offset + n) of a file of `file_size` bytes.
Status ReadAt(int fd, uint64_t file_size, uint64_t offset, void* out, uint64_t n, std::string_view what) {
  if (!InFile(file_size, offset, n)) {
    return MakeErrorF(ErrorCode::kParse, "ELF {} [{}, +{}) lies outside the file ({} bytes)", what, offset, n,
                      file_size);
  }
  auto* p = static_cast<char*>(out);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(ErrorCode::kIo, "pread", errno);
    }
    if (r == 0) return MakeErrorF(ErrorCode::kParse, "ELF {}: file shorter than expected", what);
    done += static_cast<uint64_t>(r);
  }
  return Ok();
}

}  // namespace

std::optional<uint64_t> ElfInfo::FileOffset(uint64_t vaddr) const {
  for (const ElfLoadSegment& s : segments) {
    if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) return vaddr - s.vaddr + s.offset;
  }
  return std::nullopt;
}

std::optional<uint64_t> ElfInfo::SymbolOffset(std::string_view name) const {
  auto it = functions.find(std::string(name));
  if (it == functions.end()) return std::nullopt;
  return FileOffset(it->second.value);
}

Result<ElfInfo> ReadElf(const std::string& path, const std::unordered_set<std::string>* wanted,
                        const ElfLimits& limits) {
  // O_NONBLOCK: a path a container controls could be swapped for a FIFO, whose open would block.
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int err = errno;
    return ErrnoError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, path, err);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError(ErrorCode::kIo, path, errno);
  if (!S_ISREG(st.st_mode)) return MakeErrorF(ErrorCode::kParse, "{}: not a regular file", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  Elf64_Ehdr eh{};
  if (auto s = ReadAt(fd.get(), size, 0, &eh, sizeof(eh), "header"); !s) {
    return MakeErrorF(ErrorCode::kParse, "{}: {}", path, s.error().message);
  }
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return MakeErrorF(ErrorCode::kParse, "{}: not an ELF file", path);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return MakeErrorF(ErrorCode::kParse, "{}: only 64-bit little-endian ELF is supported", path);
  }
  if (eh.e_phentsize != 0 && eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return MakeErrorF(ErrorCode::kParse, "{}: unexpected program header size {}", path, eh.e_phentsize);
  }
  if (eh.e_shentsize != 0 && eh.e_shentsize != sizeof(Elf64_Shdr)) {
    return MakeErrorF(ErrorCode::kParse, "{}: unexpected section header size {}", path, eh.e_shentsize);
  }
  if (eh.e_phnum > limits.max_segments || eh.e_shnum > limits.max_sections) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "{}: {} program headers / {} sections exceed the bounds",
                      path, eh.e_phnum, eh.e_shnum);
  }

  ElfInfo info;
  if (eh.e_phnum > 0) {
    if (!InFile(size, eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr))) {
      return MakeErrorF(ErrorCode::kParse, "{}: program headers lie outside the file", path);
    }
    std::vector<Elf64_Phdr> ph(eh.e_phnum);
    if (auto s =
            ReadAt(fd.get(), size, eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr), "program headers");
        !s) {
      return MakeErrorF(ErrorCode::kParse, "{}: {}", path, s.error().message);
    }
    for (const Elf64_Phdr& p : ph) {
      if (p.p_type != PT_LOAD) continue;
      if (p.p_filesz > p.p_memsz || p.p_offset > size || p.p_filesz > size - p.p_offset) {
        return MakeErrorF(ErrorCode::kParse, "{}: PT_LOAD segment out of the file", path);
      }
      info.segments.push_back({p.p_vaddr, p.p_memsz, p.p_offset, p.p_filesz, (p.p_flags & PF_X) != 0});
    }
  }
  // e_shnum == 0 with e_shoff != 0 means "more than 0xff00 sections" (count in shdr[0]); such
  // files are not shared libraries we target.
  if (eh.e_shnum == 0) return info;
  if (!InFile(size, eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
    return MakeErrorF(ErrorCode::kParse, "{}: section headers lie outside the file", path);
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (auto s =
          ReadAt(fd.get(), size, eh.e_shoff, sh.data(), sh.size() * sizeof(Elf64_Shdr), "section headers");
      !s) {
    return MakeErrorF(ErrorCode::kParse, "{}: {}", path, s.error().message);
  }
  // .dynsym first so its entries win (exported names are what a caller reaches).
  for (const uint32_t type : {static_cast<uint32_t>(SHT_DYNSYM), static_cast<uint32_t>(SHT_SYMTAB)}) {
    for (const Elf64_Shdr& s : sh) {
      if (s.sh_type != type) continue;
      if (type == SHT_SYMTAB) info.has_symtab = true;
      if (s.sh_entsize != sizeof(Elf64_Sym) || s.sh_link >= sh.size()) {
        return MakeErrorF(ErrorCode::kParse, "{}: malformed symbol table", path);
      }
      const Elf64_Shdr& strs = sh[s.sh_link];
      if (strs.sh_type != SHT_STRTAB)
        return MakeErrorF(ErrorCode::kParse, "{}: symbol names not in a string table", path);
      if (s.sh_size > limits.max_table_bytes || strs.sh_size > limits.max_table_bytes) {
        return MakeErrorF(ErrorCode::kResourceExhausted, "{}: a symbol table exceeds {} bytes", path,
                          limits.max_table_bytes);
      }
      // Both tables must lie inside the file before anything is sized from them: the header
      // fields are the file's word, and the file may be a container's forgery.
      if (!InFile(size, s.sh_offset, s.sh_size) || !InFile(size, strs.sh_offset, strs.sh_size)) {
        return MakeErrorF(ErrorCode::kParse, "{}: a symbol or string table lies outside the file ({} bytes)",
                          path, size);
      }
      const uint64_t n = s.sh_size / sizeof(Elf64_Sym);
      if (info.symbols_read + n > limits.max_symbols) {
        return MakeErrorF(ErrorCode::kResourceExhausted, "{}: more than {} symbols", path,
                          limits.max_symbols);
      }
      info.symbols_read += n;
      std::vector<Elf64_Sym> syms(n);
      std::string names(strs.sh_size, '\0');
      if (auto r = ReadAt(fd.get(), size, s.sh_offset, syms.data(), n * sizeof(Elf64_Sym), "symbol table");
          !r) {
        return MakeErrorF(ErrorCode::kParse, "{}: {}", path, r.error().message);
      }
      if (auto r = ReadAt(fd.get(), size, strs.sh_offset, names.data(), strs.sh_size, "string table"); !r) {
        return MakeErrorF(ErrorCode::kParse, "{}: {}", path, r.error().message);
      }
      for (const Elf64_Sym& sym : syms) {
        if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
          continue;
        if (sym.st_name >= names.size()) continue;  // a name out of the table: ignore the entry
        const char* start = names.data() + sym.st_name;
        const size_t len = strnlen(start, names.size() - sym.st_name);
        if (len == 0 || sym.st_name + len >= names.size()) continue;  // unterminated
        std::string name(start, len);
        if (wanted != nullptr && !wanted->contains(name)) continue;
        const unsigned bind = ELF64_ST_BIND(sym.st_info);
        ElfSymbol e{sym.st_value, sym.st_size, bind == STB_GLOBAL || bind == STB_WEAK, type == SHT_DYNSYM};
        info.functions.try_emplace(std::move(name), e);
      }
    }
  }
  return info;
}

}  // namespace ithbat::collect::probes
