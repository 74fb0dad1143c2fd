package safezip

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// Record layouts from the zip specification (APPNOTE.TXT), as archive/zip
// reads them.
const (
	dirHeaderSig = 0x02014b50
	dirEndSig    = 0x06054b50
	dir64LocSig  = 0x07064b50
	dir64EndSig  = 0x06064b50

	dirHeaderLen = 46 // + name + extra + comment
	dirEndLen    = 22 // + comment
	dir64LocLen  = 20
	dir64EndLen  = 56 // + extensible data
)

var errNoDirectory = errors.New("zip: not a valid zip file")

// countEntries returns an upper bound on the number of entries zip.NewReader
// would load from the archive, without allocating per entry. It locates the
// central directory exactly as archive/zip does and counts consecutive
// directory headers from there; where archive/zip might start from either of
// two offsets it counts from both and returns the larger count.
func countEntries(r io.ReaderAt, size int64) (int, error) {
	starts, err := directoryStarts(r, size)
	if err != nil {
		return 0, err
	}
	most := 0
	for _, start := range starts {
		n, err := countHeaders(r, size, start)
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	return most, nil
}

// countHeaders counts the directory headers that follow each other from
// offset start. Like archive/zip it stops at the first record that is not a
// complete directory header.
func countHeaders(r io.ReaderAt, size, start int64) (int, error) {
	br := bufio.NewReader(io.NewSectionReader(r, start, size-start))
	var hdr [dirHeaderLen]byte
	for n := 0; ; n++ {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return n, nil
			}
			return 0, err
		}
		if binary.LittleEndian.Uint32(hdr[0:]) != dirHeaderSig {
			return n, nil
		}
		variable := int(binary.LittleEndian.Uint16(hdr[28:])) +
			int(binary.LittleEndian.Uint16(hdr[30:])) +
			int(binary.LittleEndian.Uint16(hdr[32:]))
		if _, err := br.Discard(variable); err != nil {
			if err == io.EOF {
				return n, nil
			}
			return 0, err
		}
	}
}

// directoryStarts returns the offsets at which archive/zip may start reading
// the central directory, mirroring its readDirectoryEnd.
func directoryStarts(r io.ReaderAt, size int64) ([]int64, error) {
	endOffset, end, err := findDirectoryEnd(r, size)
	if err != nil {
		return nil, err
	}
	records := uint64(binary.LittleEndian.Uint16(end[10:]))
	dirSize := uint64(binary.LittleEndian.Uint32(end[12:]))
	dirOffset := uint64(binary.LittleEndian.Uint32(end[16:]))
	if records == 0xffff || dirSize == 0xffff || dirOffset == 0xffffffff {
		p, err := findDirectory64End(r, endOffset)
		if err != nil {
			return nil, err
		}
		if p >= 0 {
			endOffset = p
			if dirSize, dirOffset, err = readDirectory64End(r, p); err != nil {
				return nil, err
			}
		}
	}
	const maxInt64 = 1<<63 - 1
	if dirSize > maxInt64 || dirOffset > maxInt64 {
		return nil, errNoDirectory
	}
	base := endOffset - int64(dirSize) - int64(dirOffset)
	if o := base + int64(dirOffset); o < 0 || o >= size {
		return nil, errNoDirectory
	}
	if base > 0 {
		// archive/zip falls back to base 0 when a header parses there;
		// which way it goes depends on details not worth mirroring.
		return []int64{base + int64(dirOffset), int64(dirOffset)}, nil
	}
	return []int64{base + int64(dirOffset)}, nil
}

// findDirectoryEnd returns the offset of the end of central directory record
// and the record itself, searching the last 1 KiB and then the last 65 KiB of
// the archive as archive/zip does.
func findDirectoryEnd(r io.ReaderAt, size int64) (int64, []byte, error) {
	for i, n := range []int64{1024, 65 * 1024} {
		n = min(n, size)
		buf := make([]byte, n)
		if _, err := r.ReadAt(buf, size-n); err != nil && err != io.EOF {
			return 0, nil, err
		}
		if p := findSignatureInBlock(buf); p >= 0 {
			return size - n + int64(p), buf[p:], nil
		}
		if i == 1 || n == size {
			break
		}
	}
	return 0, nil, errNoDirectory
}

// findSignatureInBlock returns the position of the last end of central
// directory signature in b, or -1 if there is none or its comment is
// truncated.
func findSignatureInBlock(b []byte) int {
	for i := len(b) - dirEndLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(b[i:]) == dirEndSig {
			n := int(binary.LittleEndian.Uint16(b[i+dirEndLen-2:]))
			if n+dirEndLen+i > len(b) {
				return -1
			}
			return i
		}
	}
	return -1
}

// findDirectory64End returns the offset of the zip64 end of central directory
// record named by the locator just before the end record at endOffset, or -1
// if there is no valid locator.
func findDirectory64End(r io.ReaderAt, endOffset int64) (int64, error) {
	locOffset := endOffset - dir64LocLen
	if locOffset < 0 {
		return -1, nil
	}
	buf := make([]byte, dir64LocLen)
	if _, err := r.ReadAt(buf, locOffset); err != nil {
		return -1, err
	}
	if binary.LittleEndian.Uint32(buf[0:]) != dir64LocSig ||
		binary.LittleEndian.Uint32(buf[4:]) != 0 || // disk with the zip64 end record
		binary.LittleEndian.Uint32(buf[16:]) != 1 { // total number of disks
		return -1, nil
	}
	return int64(binary.LittleEndian.Uint64(buf[8:])), nil
}

// readDirectory64End returns the directory size and offset from the zip64 end
// of central directory record at offset.
func readDirectory64End(r io.ReaderAt, offset int64) (dirSize, dirOffset uint64, err error) {
	buf := make([]byte, dir64EndLen)
	if _, err := r.ReadAt(buf, offset); err != nil {
		return 0, 0, err
	}
	if binary.LittleEndian.Uint32(buf[0:]) != dir64EndSig {
		return 0, 0, errNoDirectory
	}
	return binary.LittleEndian.Uint64(buf[40:]), binary.LittleEndian.Uint64(buf[48:]), nil
}
