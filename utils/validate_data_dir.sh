#!/usr/bin/env bash
# validate_data_dir.sh: check a captionlib data (or dump) directory; exits 1 with a message
# naming the file and the offending line/key at the first problem found.
set -euo pipefail

# The media lists ("<clip-id> <path>"): a data dir has at most one. Passed to the checker below.
media_lists="wav.scp image.scp video.scp"
usage() {
  cat 1>&2 << EOF
Usage: validate_data_dir.sh [--no-feats] [--no-text] [--no-media|--no-wav] <data-dir>
The media list is whichever of ${media_lists} is present (audio, images,
videos); more than one present is an error. clip2id ("<clip-id> <corpus id>", read by the
feature importers) is optional; reco2dur and aud2name are optional audio-only files.
Checks (each file only if present, unless required):
  - every key-first file (${media_lists} clip2id feats.scp reco2dur aud2name
    utt2num_frames text utt2spk spk2utt segments) is sorted by key with LC_ALL=C, keys
    unique, printable ASCII, no whitespace, lines end in "\\n" (no CR);
  - text has no empty caption; utt2spk has "<caption-id> <clip-id>" lines, the same keys as
    text, and spk2utt equals its inversion (utils/utt2spk_to_spk2utt.pl);
  - every caption's clip is in the media list (else in clip2id) and in feats.scp when
    checking feats, and every clip of those has a caption (fix with utils/fix_data_dir.sh);
  - the media list, clip2id, reco2dur and aud2name have the same keys; feats.scp and
    utt2num_frames have the same keys as the media list (else clip2id); reco2dur > 0,
    utt2num_frames and feats_dim positive integers.
Required: feats.scp (unless --no-feats), text + utt2spk + spk2utt (unless --no-text), a media
list (unless --no-media). With --no-X the file(s) X are neither required nor checked.
--no-wav is the old name of --no-media. A dir whose features are imported from clip2id
(captions + clip2id, no media list) validates with --no-media.
EOF
  exit 1
}

no_feats=false
no_text=false
no_media=false
while [ $# -gt 0 ]; do
  case "$1" in
    --no-feats | --no_feats) no_feats=true ;;
    --no-text | --no_text) no_text=true ;;
    --no-media | --no_media | --no-wav | --no_wav) no_media=true ;;
    -h | --help) usage ;;
    --*) echo "validate_data_dir.sh: unknown option $1" 1>&2; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 1 ] || usage
dir=${1%/}
if [ ! -d "${dir}" ]; then
  echo "validate_data_dir.sh: no such directory ${dir}" 1>&2
  exit 1
fi

LC_ALL=C perl - "${dir}" "${no_feats}" "${no_text}" "${no_media}" "${media_lists}" << 'PERL'
use strict;
use warnings;
my ($dir, $no_feats, $no_text, $no_media, $media_lists) = @ARGV;
my @media_lists = split(' ', $media_lists);
sub fail { print STDERR "validate_data_dir.sh: $dir: $_[0]\n"; exit 1; }

# Reads a key-first file; returns ([keys in order], {key => rest}, {key => line number}).
sub read_kv {
  my ($name) = @_;
  my $path = "$dir/$name";
  open(my $fh, "<", $path) or fail("cannot read $name: $!");
  my (@keys, %val, %lno);
  my $prev;
  while (my $l = <$fh>) {
    my $n = $.;
    fail("$name:$n: last line does not end with a newline") unless $l =~ s/\n$//;
    fail("$name:$n: carriage return (DOS line ending) in line") if $l =~ /\r/;
    fail("$name:$n: empty line") if $l =~ /^\s*$/;
    fail("$name:$n: line starts with whitespace") if $l =~ /^\s/;
    $l =~ /^(\S+)(?:\s+(.*))?$/ or fail("$name:$n: cannot parse line");
    my ($key, $rest) = ($1, defined $2 ? $2 : "");
    fail("$name:$n: key '$key' is not printable ASCII") unless $key =~ /^[\x21-\x7e]+$/;
    if (defined $prev) {
      fail("$name:$n: duplicate key '$key'") if $key eq $prev;
      fail("$name:$n: not sorted (LC_ALL=C): key '$key' comes after '$prev'") if $key lt $prev;
    }
    $prev = $key;
    push @keys, $key;
    $val{$key} = $rest;
    $lno{$key} = $n;
  }
  close($fh);
  fail("$name is empty") unless @keys;
  return (\@keys, \%val, \%lno);
}

sub have { return -e "$dir/$_[0]"; }

# Reports the first key of $a (file $an) missing in $b (file $bn) and vice versa.
sub same_keys {
  my ($an, $ak, $bn, $bk) = @_;
  my %b = map { $_ => 1 } @$bk;
  foreach my $k (@$ak) { fail("key '$k' is in $an but not in $bn") unless $b{$k}; }
  my %a = map { $_ => 1 } @$ak;
  foreach my $k (@$bk) { fail("key '$k' is in $bn but not in $an") unless $a{$k}; }
}

my %f;    # name => [keys, val, lno]
# the media list: whichever of @media_lists is present (none with --no-media)
my $media;
if ($no_media ne "true") {
  my @present = grep { have($_) } @media_lists;
  fail("more than one media list: @present (keep only one)") if @present > 1;
  fail("no media list (one of @media_lists) found (use --no-media if intended)") unless @present;
  $media = $present[0];
}
my @check = qw(clip2id reco2dur aud2name segments);
push @check, $media if defined $media;
push @check, qw(feats.scp utt2num_frames) unless $no_feats eq "true";
push @check, qw(text) unless $no_text eq "true";
push @check, qw(utt2spk spk2utt);
fail("feats.scp is missing (use --no-feats if intended)") if $no_feats ne "true" && !have("feats.scp");
if ($no_text ne "true") {
  fail("text is missing (use --no-text if intended)") unless have("text");
}
foreach my $name (@check) {
  $f{$name} = [read_kv($name)] if have($name);
}
fail("utt2spk is missing") if ($f{text} || $f{spk2utt}) && !$f{utt2spk};
fail("spk2utt is missing (make it with utils/utt2spk_to_spk2utt.pl)") if $f{utt2spk} && !$f{spk2utt};

if ($f{text}) {
  my ($k, $v, $l) = @{$f{text}};
  foreach my $key (@$k) {
    fail("text:$l->{$key}: empty caption for '$key'") unless $v->{$key} =~ /\S/;
  }
}
if (defined $media) {
  my ($k, $v, $l) = @{$f{$media}};
  foreach my $key (@$k) {
    fail("$media:$l->{$key}: no path for '$key'") unless $v->{$key} =~ /\S/;
  }
}
if ($f{clip2id}) {
  my ($k, $v, $l) = @{$f{clip2id}};
  foreach my $key (@$k) {
    fail("clip2id:$l->{$key}: no corpus id for '$key'") unless $v->{$key} =~ /\S/;
  }
}
if ($f{"feats.scp"}) {
  my ($k, $v, $l) = @{$f{"feats.scp"}};
  foreach my $key (@$k) {
    fail("feats.scp:$l->{$key}: bad entry for '$key' (expected '<clip-id> <path>')")
      unless $v->{$key} =~ /^\S+$/;
  }
}
if ($f{reco2dur}) {
  my ($k, $v, $l) = @{$f{reco2dur}};
  foreach my $key (@$k) {
    fail("reco2dur:$l->{$key}: bad duration '$v->{$key}' for '$key'")
      unless $v->{$key} =~ /^\d*\.?\d+(?:[eE][-+]?\d+)?$/ && $v->{$key} > 0;
  }
}
if ($f{utt2num_frames}) {
  my ($k, $v, $l) = @{$f{utt2num_frames}};
  foreach my $key (@$k) {
    fail("utt2num_frames:$l->{$key}: bad frame count '$v->{$key}' for '$key'")
      unless $v->{$key} =~ /^\d+$/ && $v->{$key} > 0;
  }
}
if ($no_feats ne "true" && have("feats_dim")) {
  open(my $fh, "<", "$dir/feats_dim") or fail("cannot read feats_dim");
  my $d = join("", <$fh>);
  fail("feats_dim: expected one positive integer, got '$d'") unless $d =~ /^\s*[1-9]\d*\s*$/;
}

# the clip list the captions are checked against: the media list, else clip2id
my $clip_list = defined $media ? $media : ($f{clip2id} ? "clip2id" : undef);

# utt2spk / spk2utt / text
my %clip_of;
if ($f{utt2spk}) {
  my ($k, $v, $l) = @{$f{utt2spk}};
  my (@order, %utts);
  foreach my $u (@$k) {
    my $s = $v->{$u};
    fail("utt2spk:$l->{$u}: expected '<caption-id> <clip-id>', got '$u $s'") unless $s =~ /^[\x21-\x7e]+$/;
    $clip_of{$u} = $s;
    push @order, $s unless $utts{$s};
    push @{$utts{$s}}, $u;
  }
  my ($sk, $sv, $sl) = @{$f{spk2utt}};
  foreach my $s (@$sk) {
    fail("spk2utt:$sl->{$s}: clip '$s' is not in utt2spk") unless $utts{$s};
    my @got = split(' ', $sv->{$s});
    foreach my $u (@got) {
      fail("spk2utt:$sl->{$s}: id '$u' is not printable ASCII") unless $u =~ /^[\x21-\x7e]+$/;
    }
    my $want = join(" ", @{$utts{$s}});
    fail("spk2utt:$sl->{$s}: line for '$s' is '" . join(" ", @got) . "' but utt2spk gives '$want' "
      . "(regenerate with utils/utt2spk_to_spk2utt.pl)") unless join(" ", @got) eq $want;
  }
  my %ins = map { $_ => 1 } @$sk;
  foreach my $s (@order) { fail("clip '$s' is in utt2spk but not in spk2utt") unless $ins{$s}; }
  same_keys("text", $f{text}[0], "utt2spk", $k) if $f{text};
  foreach my $clipfile (grep { defined } $clip_list, "feats.scp") {
    next unless $f{$clipfile};
    my $cv = $f{$clipfile}[1];
    foreach my $u (@$k) {
      fail("utt2spk:$l->{$u}: clip '$clip_of{$u}' of caption '$u' is not in $clipfile")
        unless exists $cv->{$clip_of{$u}};
    }
    foreach my $c (@{$f{$clipfile}[0]}) {
      fail("$clipfile:$f{$clipfile}[2]{$c}: clip '$c' has no caption in utt2spk (run utils/fix_data_dir.sh)")
        unless $utts{$c};
    }
  }
}
if ($f{segments}) {
  my ($k, $v, $l) = @{$f{segments}};
  foreach my $u (@$k) {
    my @s = split(' ', $v->{$u});
    fail("segments:$l->{$u}: expected '<caption-id> <clip-id> <start> <end>'") unless @s == 3;
    fail("segments:$l->{$u}: clip '$s[0]' is not in $media") if defined $media && !exists $f{$media}[1]{$s[0]};
    fail("segments:$l->{$u}: clip '$s[0]' differs from utt2spk ('" . ($clip_of{$u} // "none") . "')")
      if $f{utt2spk} && ($clip_of{$u} // "") ne $s[0];
  }
}

# clip-level files agree
my @clipfiles = grep { defined && $f{$_} } ($media, "clip2id", "reco2dur", "aud2name");
for my $i (1 .. $#clipfiles) {
  same_keys($clipfiles[0], $f{$clipfiles[0]}[0], $clipfiles[$i], $f{$clipfiles[$i]}[0]);
}
if ($f{"feats.scp"}) {
  same_keys("feats.scp", $f{"feats.scp"}[0], $clip_list, $f{$clip_list}[0]) if defined $clip_list;
  same_keys("feats.scp", $f{"feats.scp"}[0], "utt2num_frames", $f{utt2num_frames}[0]) if $f{utt2num_frames};
}
print STDERR "validate_data_dir.sh: Successfully validated data-directory $dir\n";
exit 0;
PERL
