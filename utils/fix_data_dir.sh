#!/usr/bin/env bash
# fix_data_dir.sh: make a captionlib data (or dump) directory consistent, in place.
set -euo pipefail

# The files filtered, by key; passed to the perl below.
clip_files="wav.scp image.scp video.scp clip2id feats.scp reco2dur aud2name utt2num_frames"
cap_files="text utt2spk segments"
usage() {
  cat 1>&2 << EOF
Usage: fix_data_dir.sh <data-dir>
Keeps only the clips and captions present consistently in all the files that exist:
  clip-keyed:    ${clip_files}
  caption-keyed: ${cap_files}   (utt2spk maps caption-id -> clip-id)
A caption is dropped when its clip is gone; a clip is dropped when it has no caption
(only when utt2spk exists). Lines repeated verbatim are merged; a key repeated with
different values is an error. Files are re-sorted with LC_ALL=C and spk2utt is regenerated.
Every removal is reported (count, files and example ids, by reason). When no clip or no
caption would remain (e.g. ids that do not match across the files), nothing is changed and
the exit status is 1; so is it for a UTF-8 byte-order mark at the start of a file.
The original files are saved in <data-dir>/.backup/ first, or in the first free
<data-dir>/.backup.N (N = 2, 3, ...) when that exists; an existing backup is never
overwritten. When nothing would change, nothing is written and no backup is made.
EOF
  exit 1
}

case "${1:-}" in -h | --help | "") usage ;; esac
[ $# -eq 1 ] || usage
dir=${1%/}
if [ ! -d "${dir}" ]; then
  echo "fix_data_dir.sh: no such directory ${dir}" 1>&2
  exit 1
fi

LC_ALL=C perl - "${dir}" "${clip_files}" "${cap_files}" << 'PERL'
use strict;
use warnings;
use File::Copy qw(copy);
my ($dir, $clip_files, $cap_files) = @ARGV;
sub fail { print STDERR "fix_data_dir.sh: $dir: $_[0]\n"; exit 1; }

my @clip_files = split(' ', $clip_files);
my @cap_files = split(' ', $cap_files);

# Reads a key-first file into {key => full line}.
sub read_kv {
  my ($name) = @_;
  open(my $fh, "<", "$dir/$name") or fail("cannot read $name: $!");
  my %line;
  while (my $l = <$fh>) {
    fail("$name:$.: starts with a UTF-8 byte-order mark, which would become part of the id"
      . " '$1' and drop it; remove the mark (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' $dir/$name)")
      if $. == 1 && $l =~ /^\xEF\xBB\xBF(\S*)/;
    $l =~ s/\r?\n$//;
    next if $l =~ /^\s*$/;
    $l =~ /^\s*(\S+)/;
    my $k = $1;
    if (exists $line{$k}) {
      next if $line{$k} eq $l;
      fail("$name:$.: key '$k' appears twice with different values; fix it by hand");
    }
    $line{$k} = $l;
  }
  close($fh);
  return \%line;
}

my %data;
foreach my $name (@clip_files, @cap_files) {
  $data{$name} = read_kv($name) if -f "$dir/$name";
}
fail("has @{[grep { $data{$_} } qw(text segments)]} but no utt2spk") if ($data{text} || $data{segments}) && !$data{utt2spk};
fail("has spk2utt but no utt2spk") if -f "$dir/spk2utt" && !$data{utt2spk};
my @present_clip = grep { $data{$_} } @clip_files;
my @present_cap = grep { $data{$_} } @cap_files;
fail("none of @clip_files @cap_files found") unless @present_clip || @present_cap;

# clip of each caption
my %clip_of;
if ($data{utt2spk}) {
  foreach my $u (keys %{$data{utt2spk}}) {
    my @f = split(' ', $data{utt2spk}{$u});
    fail("utt2spk: bad line '$data{utt2spk}{$u}' (expected '<caption-id> <clip-id>')") unless @f == 2;
    $clip_of{$u} = $f[1];
  }
}

# all clips/captions seen anywhere (for the report)
my (%all_clips, %all_caps);
foreach my $n (@present_clip) { $all_clips{$_} = 1 for keys %{$data{$n}}; }
foreach my $n (@present_cap) { $all_caps{$_} = 1 for keys %{$data{$n}}; }
$all_clips{$_} = 1 for values %clip_of;

# intersect clip-keyed files
my %clips;
if (@present_clip) {
  %clips = %{$data{$present_clip[0]}};
  foreach my $n (@present_clip[1 .. $#present_clip]) {
    foreach my $c (keys %clips) { delete $clips{$c} unless exists $data{$n}{$c}; }
  }
} else {
  %clips = map { $_ => 1 } values %clip_of;
}
# intersect caption-keyed files, keep captions whose clip survives
my %caps;
my %clips_matched = %clips;    # the clips before those without a caption are dropped
if (@present_cap) {
  %caps = %{$data{$present_cap[0]}};
  foreach my $n (@present_cap[1 .. $#present_cap]) {
    foreach my $u (keys %caps) { delete $caps{$u} unless exists $data{$n}{$u}; }
  }
  foreach my $u (keys %caps) {
    delete $caps{$u} unless exists $clip_of{$u} && exists $clips{$clip_of{$u}};
  }
  if ($data{segments}) {
    foreach my $u (keys %caps) {
      my @f = split(' ', $data{segments}{$u});
      delete $caps{$u} unless @f >= 2 && $f[1] eq $clip_of{$u};
    }
  }
  # drop clips without any caption
  my %has_cap = map { $clip_of{$_} => 1 } keys %caps;
  foreach my $c (keys %clips) { delete $clips{$c} unless $has_cap{$c}; }
}

# Report every removal, grouped by reason: "<n> clips|captions <reason>: <first ids> ...".
# (A clip is "in" utt2spk when a caption maps to it.)
sub show { my ($id) = @_; $id =~ s/([^\x21-\x7e])/sprintf("\\x%02X", ord($1))/ge; return $id; }
my %clip_in_u2s = map { $_ => 1 } values %clip_of;
my @clip_src = (@present_clip, $data{utt2spk} ? ("utt2spk") : ());
my (%why_clip, %why_cap);
foreach my $c (grep { !exists $clips{$_} } keys %all_clips) {
  my @lack = grep { !($_ eq "utt2spk" ? $clip_in_u2s{$c} : exists $data{$_}{$c}) } @clip_src;
  my @have = grep { $_ eq "utt2spk" ? $clip_in_u2s{$c} : exists $data{$_}{$c} } @clip_src;
  my $why = @lack ? "in @have but not in @lack" : "whose captions were all removed";
  push @{$why_clip{$why}}, $c;
}
foreach my $u (grep { !exists $caps{$_} } keys %all_caps) {
  my @lack = grep { !exists $data{$_}{$u} } @present_cap;
  my @have = grep { exists $data{$_}{$u} } @present_cap;
  my $why;
  if (@lack) {
    $why = "in @have but not in @lack";
  } elsif (!exists $clips_matched{$clip_of{$u}}) {
    $why = "of a removed clip";
  } else {
    $why = "whose segments line names another clip than utt2spk";
  }
  push @{$why_cap{$why}}, $u;
}
my @details;
foreach my $group ([\%why_clip, "clip", "clips"], [\%why_cap, "caption", "captions"]) {
  my ($why, $one, $many) = @$group;
  foreach my $r (sort keys %$why) {
    my @ids = sort @{$why->{$r}};
    my $eg = join(" ", map { show($_) } @ids[0 .. ($#ids < 2 ? $#ids : 2)]);
    $eg .= " ..." if @ids > 3;
    push @details, "  " . scalar(@ids) . " " . (@ids == 1 ? $one : $many) . " $r: $eg\n";
  }
}

my $nc = scalar(keys %clips);
my $nu = scalar(keys %caps);
my $rc = scalar(keys %all_clips) - $nc;
my $ru = scalar(keys %all_caps) - $nu;
my $counts = "kept $nc clips";
$counts .= " and $nu captions" if @present_cap;
$counts .= "; removed $rc clips";
$counts .= " and $ru captions" if @present_cap;

# Never empty the directory: that is a wrong prefix or a broken file, not something to fix.
if ($nc == 0 || (@present_cap && $nu == 0)) {
  my $what = $nc == 0 ? "clip" : "caption";
  my $files = join(" ", @present_clip, @present_cap);
  if (!%all_clips && !%all_caps) {
    print STDERR "fix_data_dir.sh: $dir: no $what found in $files (empty?); nothing was changed\n";
  } else {
    print STDERR "fix_data_dir.sh: $dir: refusing to remove every $what (all $rc clips"
      . (@present_cap ? " and $ru captions" : "") . "): the ids do not match across $files;"
      . " nothing was changed. Removals it would make:\n", @details;
  }
  exit 1;
}

# The new contents; files whose contents do not change are left alone.
sub by_key { my ($ka) = $a =~ /^\s*(\S+)/; my ($kb) = $b =~ /^\s*(\S+)/; $ka cmp $kb or $a cmp $b; }
my %new;
foreach my $n (@present_clip) {
  $new{$n} = [map { $data{$n}{$_} } grep { exists $clips{$_} } keys %{$data{$n}}];
}
foreach my $n (@present_cap) {
  $new{$n} = [map { $data{$n}{$_} } grep { exists $caps{$_} } keys %{$data{$n}}];
}
if ($data{utt2spk}) {
  my %utts;
  foreach my $u (sort keys %caps) { push @{$utts{$clip_of{$u}}}, $u; }
  $new{spk2utt} = [map { join(" ", $_, @{$utts{$_}}) } keys %utts];
}
my @changed;
foreach my $n (@present_clip, @present_cap, $data{utt2spk} ? ("spk2utt") : ()) {
  $new{$n} = join("", map { "$_\n" } sort by_key @{$new{$n}});
  my $old;
  if (open(my $fh, "<", "$dir/$n")) { local $/; $old = <$fh>; close($fh); }
  push @changed, $n unless defined $old && $old eq $new{$n};
}
if (!@changed) {
  print STDERR "fix_data_dir.sh: $dir: $counts (nothing to change)\n";
  exit 0;
}

# Back up the originals of all the files (never over an older backup), then replace.
my $backup = "$dir/.backup";
for (my $k = 2; !mkdir($backup); $k++) {
  fail("cannot create $backup: $!") unless -e $backup;
  $backup = "$dir/.backup.$k";
}
foreach my $n (sort keys %new) {
  next unless -f "$dir/$n";
  copy("$dir/$n", "$backup/$n") or fail("cannot back up $n to $backup: $! (nothing was changed)");
}
foreach my $n (@changed) {
  my $tmp = "$dir/.$n.tmp";
  open(my $fh, ">", $tmp) or fail("cannot write $tmp: $! (originals in $backup)");
  print $fh $new{$n};
  close($fh) or fail("error writing $tmp: $! (originals in $backup)");
  rename($tmp, "$dir/$n") or fail("cannot replace $n: $! (originals in $backup)");
}
print STDERR "fix_data_dir.sh: $dir: $counts (originals in $backup)", (@details ? ":\n" : "\n"), @details;
exit 0;
PERL
