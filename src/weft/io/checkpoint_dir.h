// A checkpoint directory: the place where a run keeps its checkpoints so that each one appears
// whole or not at all. A save may be killed or find the disk full at any write, fsync or rename;
// afterwards DIR still holds a complete checkpoint (the previous one, or the new one once its
// pointer moved), never a mixture of the two.
//
//   DIR/step-00000040/         one complete checkpoint: every file one save wrote (model,
//                              optimizer and trainer state, a tokenizer; one shard per rank)
//   DIR/latest                 -> step-00000040, the pointer: a symlink naming the current one
//   DIR/model.safetensors      -> latest/model.safetensors, one symlink per file of the current
//                              checkpoint, for readers that know only DIR/NAME
//   DIR/.tmp-step-00000040     a save in progress (or one that was killed)
//
// A save writes its files into the staging directory, fsyncs each of them and the directory,
// renames it to its step name, fsyncs DIR, and only then replaces DIR/latest by renaming a new
// symlink over it. That rename is the commit point: before it, every reader sees the previous
// checkpoint; after it, the new one, complete and durable. The pointer is a symlink rather than a
// file holding the name so that DIR/NAME, which resolves through it, switches in the same rename:
// a third-party reader of DIR/model.safetensors never sees one save's model beside another's
// tokenizer.
//
// Only the current step directory is kept: the pointer, not a second copy, is what protects the
// previous checkpoint until the new one is whole, and a full disk is the failure that a second
// copy would make likelier. Everything else a save leaves behind (staging directories, atomic
// writes' temporaries, step directories the pointer does not name, links to files the current
// checkpoint lacks) is removed at the start and the end of the next save in DIR; nothing else in
// DIR (metrics, logs) is touched.
//
// The staging path depends on DIR and the step alone, so that in a data-parallel save every rank
// can write its shard file into it between one rank's begin and that rank's commit. A directory
// without DIR/latest is a checkpoint written before this layout, with its files directly in it,
// and still reads as one. Failures throw IOError naming the path and the system's reason.
#pragma once
#include <cstdint>
#include <string>

namespace weft::io {

class CheckpointWriter {
 public:
  // Creates DIR if needed, removes what earlier saves left, and creates an empty staging directory.
  CheckpointWriter(std::string dir, int64_t step);
  // Not committed: removes the staging directory; the previous checkpoint stays current.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const std::string& staging() const { return staging_; }  // write the checkpoint's files here
  // Makes the staged files DIR's current checkpoint and returns its step directory.
  std::string commit();

 private:
  std::string dir_, staging_, name_;
  bool committed_ = false;
};

// Where CheckpointWriter(dir, step) stages its files: what the other ranks of a sharded save write
// into, once the writing rank has created it.
std::string staging_directory(const std::string& dir, int64_t step);

// The directory holding DIR's current checkpoint: the step directory DIR/latest points to, or DIR
// itself when it has no DIR/latest. A pointer to no step directory → FormatError / IOError.
std::string current_checkpoint(const std::string& dir);

}  // namespace weft::io
